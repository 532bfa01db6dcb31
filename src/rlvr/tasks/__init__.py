"""Tasks: where problems come from: the built-in arithmetic and code tasks, or data files (rlvr.tasks.files)."""

from __future__ import annotations

from pathlib import Path

from rlvr.envs import GAMES  # built-in tasks that are episodes of the environment of the same name
from rlvr.envs.verifiers_hub import TASK as VERIFIERS  # task.name=verifiers: the environment's rows
from rlvr.tasks.arithmetic import ArithmeticTask
from rlvr.tasks.code import CodeTask
from rlvr.tasks.tool_arithmetic import ToolArithmeticTask

BUILTIN = {"arithmetic", "code", "tool_arithmetic", *GAMES}


def builtin_names(name: str) -> list[str] | None:
    """The built-in tasks `task.name` names ('arithmetic', 'code', or several joined by '+'), else None."""
    names = name.split("+")
    return names if all(n in BUILTIN for n in names) and len(set(names)) == len(names) else None


def data_paths(cfg) -> list[str]:
    """The data files a run trains on: data.files, or task.name when it is not a built-in task."""
    if cfg.data.files:
        if builtin_names(cfg.task.name) is None:
            from rlvr.configlib import ConfigError
            raise ConfigError(f"task.name: {cfg.task.name!r} and data.files are both set; put every file in data.files")
        return list(cfg.data.files)
    return [] if builtin_names(cfg.task.name) or cfg.task.name == VERIFIERS else [cfg.task.name]


def teacher_solution(problem, error_rate: float, rng):
    """The cold-start demonstration of a built-in task's problem, from its imperfect teacher."""
    from rlvr.tasks import arithmetic, code, games, tool_arithmetic

    module = {code.SOURCE: code, tool_arithmetic.SOURCE: tool_arithmetic,
              **dict.fromkeys(GAMES, games)}.get(problem.source, arithmetic)
    return module.teacher_solution(problem, error_rate, rng)


def needs_code_chars(cfg) -> bool:
    """Whether the tiny model's tokenizer needs the characters of Python code (the code task)."""
    return "code" in (builtin_names(cfg.task.name) or [])


def needs_tool_tags(cfg) -> bool:
    """Whether the tiny model's tokenizer needs the tool-call tags as tokens (the tool task)."""
    return "tool_arithmetic" in (builtin_names(cfg.task.name) or [])


def build_task(cfg, *, tokenizer=None, on_event=None):
    """The run's task. With a tokenizer, data-file prompts are rendered once up front and the
    prompt-length policy applied; on_event(kind, **fields) receives every skipped or cut record."""
    t = cfg.task
    paths = data_paths(cfg)
    if paths:
        return _file_task(cfg, paths, tokenizer, on_event)
    if t.name == VERIFIERS:
        return _verifiers_task(cfg, tokenizer, on_event)
    names = builtin_names(t.name) or []  # not a data file (data_paths): one or more built-in tasks
    eval_size = max(t.eval_size, cfg.eval.n)
    tasks = {n: _builtin(n, cfg, eval_size) for n in names}
    if len(tasks) == 1:
        if cfg.data.mix:
            from rlvr.configlib import ConfigError
            raise ConfigError(f"data.mix: task.name={t.name} is one task; a mix needs several ('arithmetic+code')")
        return tasks[names[0]]
    from rlvr.tasks.mix import BuiltinMix
    return BuiltinMix(tasks, mix=cfg.data.mix, eval_size=cfg.eval.n, seed=cfg.seed)


def _builtin(name: str, cfg, eval_size: int):
    t = cfg.task
    if name == "arithmetic":
        return ArithmeticTask(min_digits=t.min_digits, max_digits=t.max_digits, ops=tuple(t.ops),
                              eval_size=eval_size, seed=cfg.seed)
    if name == "tool_arithmetic":
        return ToolArithmeticTask(eval_size=eval_size, seed=cfg.seed)
    if name in GAMES:
        from rlvr.tasks.games import TASKS
        return TASKS[name](eval_size=eval_size, seed=cfg.seed)
    return CodeTask(eval_size=eval_size, seed=cfg.seed)


def _file_task(cfg, paths: list[str], tokenizer, on_event):
    from rlvr.configlib import ConfigError
    from rlvr.tasks.files import as_chat, load_problems
    from rlvr.tasks.mix import FileTask
    from rlvr.tasks.prompts import limit_prompts

    d = cfg.data
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        key = "data.files" if d.files else "task.name"
        raise ConfigError(f"{key}: {missing[0]!r} is neither a built-in task ({', '.join(sorted(BUILTIN))}, or "
                          f"several joined by '+': arithmetic+code) nor an existing data file or directory")
    if "eval.n" in cfg.sources and cfg.eval.n > d.eval_size:
        raise ConfigError(f"eval.n: {cfg.eval.n} held-out problems asked for, but data.eval_size holds out "
                          f"{d.eval_size} records of the data files: raise data.eval_size or lower eval.n")
    problems = load_problems(paths, d.on_bad_record, on_event)
    graded = [p for p in problems if p.verifier == "env"]
    if graded and cfg.env.name == "single_turn":
        raise ConfigError(f"{graded[0].metadata.get('where', graded[0].id)}: verifier 'env' is an episode's success, "
                          "but env.name=single_turn has no environment: set env.name")
    if d.chat:
        problems = as_chat(problems, d.system_prompt)
    elif d.system_prompt:
        raise ConfigError("data.system_prompt: needs data.chat=true (a system message goes through the chat template)")
    task = FileTask(problems, mix=d.mix, eval_size=d.eval_size, seed=cfg.seed)
    if tokenizer is not None:
        limit_prompts(task, tokenizer, d.max_prompt_tokens, d.on_long_prompt, on_event)
    if on_event:
        on_event("data_loaded", files=[str(p) for p in paths], **task.describe())
    return task


def _verifiers_task(cfg, tokenizer, on_event):
    """The rows of a verifiers environment: its eval dataset held out, else data.eval_size of its rows."""
    from rlvr.envs import verifiers_hub
    from rlvr.tasks.mix import FileTask
    from rlvr.tasks.prompts import limit_prompts

    if cfg.data.on_long_prompt == "truncate":
        from rlvr.configlib import ConfigError
        raise ConfigError("data.on_long_prompt: a verifiers environment's rollout sends its own prompt, which rlvr "
                          "cannot cut: use skip or error")
    chat = tokenizer is None or getattr(tokenizer, "chat_template", None) is not None
    train, held_out = verifiers_hub.problems(cfg.env, chat)
    task = FileTask(train, mix={}, eval_size=cfg.data.eval_size, seed=cfg.seed, held_out=held_out)
    if tokenizer is not None:
        limit_prompts(task, tokenizer, cfg.data.max_prompt_tokens, cfg.data.on_long_prompt, on_event)
    if on_event:
        on_event("data_loaded", files=[cfg.env.name], **task.describe())
    return task


class ProblemSampler:
    """Draws training problems in a fixed order; `position` is its whole state (saved in checkpoints)."""

    def __init__(self, task, seed: int, position: int = 0):
        self._stream = task.train_stream(seed)
        self.position = 0
        self.take(position)

    def take(self, n: int) -> list:
        out = [next(self._stream) for _ in range(n)]
        self.position += n
        return out
