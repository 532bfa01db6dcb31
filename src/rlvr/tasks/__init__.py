"""Tasks: where problems come from: the built-in arithmetic and code tasks, or data files (rlvr.tasks.files)."""

from __future__ import annotations

from pathlib import Path

from rlvr.config.data import DataConfig, TaskConfig
from rlvr.config.env import EnvConfig
from rlvr.configlib import ConfigError
from rlvr.envs import GAMES, verifiers_hub  # GAMES: built-in tasks, each episodes of the environment of its name
from rlvr.envs.verifiers_hub import TASK as VERIFIERS  # task.name=verifiers: the environment's rows
from rlvr.tasks.arithmetic import ArithmeticTask
from rlvr.tasks.code import CodeTask
from rlvr.tasks.tool_arithmetic import ToolArithmeticTask

BUILTIN = {"arithmetic", "code", "tool_arithmetic", *GAMES}


def builtin_names(name: str) -> list[str] | None:
    """The built-in tasks `task.name` names ('arithmetic', 'code', or several joined by '+'), else None."""
    names = name.split("+")
    return names if all(n in BUILTIN for n in names) and len(set(names)) == len(names) else None


def data_paths(task: TaskConfig, data: DataConfig) -> list[str]:
    """The data files a run trains on: data.files, or task.name when it is not a built-in task."""
    if data.files:
        if builtin_names(task.name) is None:
            raise ConfigError(f"task.name: {task.name!r} and data.files are both set; put every file in data.files")
        return list(data.files)
    return [] if builtin_names(task.name) or task.name == VERIFIERS else [task.name]


def teacher_solution(problem, error_rate: float, rng):
    """The cold-start demonstration of a built-in task's problem, from its imperfect teacher."""
    from rlvr.tasks import arithmetic, code, games, tool_arithmetic

    module = {code.SOURCE: code, tool_arithmetic.SOURCE: tool_arithmetic, **dict.fromkeys(GAMES, games)}.get(
        problem.source, arithmetic
    )
    return module.teacher_solution(problem, error_rate, rng)


def needs_code_chars(task_name: str) -> bool:
    """Whether the tiny model's tokenizer needs the characters of Python code (the code task)."""
    return "code" in (builtin_names(task_name) or [])


def needs_tool_tags(task_name: str) -> bool:
    """Whether the tiny model's tokenizer needs the tool-call tags as tokens (the tool task)."""
    return "tool_arithmetic" in (builtin_names(task_name) or [])


def build_task(
    task: TaskConfig,
    data: DataConfig,
    env: EnvConfig,
    *,
    seed: int,
    eval_n: int,
    eval_n_set: bool = False,
    tokenizer=None,
    on_event=None,
    context: int | None = None,
):
    """The task of sections task and data (env: a verifiers environment's rows, or the one that grades
    problems with verifier 'env'), holding out eval_n problems (eval.n; eval_n_set: the run set it, so
    data files must hold that many). With a tokenizer, data-file prompts are rendered once up front and
    the prompt-length policy applied (within `context`, the model's positions, when given); on_event(kind,
    **fields) receives every skipped or cut record."""
    paths = data_paths(task, data)
    if paths:
        return _file_task(data, env, paths, seed, eval_n if eval_n_set else None, tokenizer, on_event, context)
    if task.name == VERIFIERS:
        return _verifiers_task(data, env, seed, tokenizer, on_event, context)
    names = builtin_names(task.name) or []  # not a data file (data_paths): one or more built-in tasks
    eval_size = max(task.eval_size, eval_n)
    tasks = {n: _builtin(n, task, eval_size, seed) for n in names}
    if len(tasks) == 1:
        if data.mix:
            raise ConfigError(f"data.mix: task.name={task.name} is one task; a mix needs several ('arithmetic+code')")
        return tasks[names[0]]
    from rlvr.tasks.mix import BuiltinMix

    return BuiltinMix(tasks, mix=data.mix, eval_size=eval_n, seed=seed)


def _builtin(name: str, t: TaskConfig, eval_size: int, seed: int):
    if name == "arithmetic":
        return ArithmeticTask(
            min_digits=t.min_digits, max_digits=t.max_digits, ops=tuple(t.ops), eval_size=eval_size, seed=seed
        )
    if name == "tool_arithmetic":
        return ToolArithmeticTask(eval_size=eval_size, seed=seed)
    if name in GAMES:
        from rlvr.tasks.games import TASKS

        return TASKS[name](eval_size=eval_size, seed=seed)
    return CodeTask(eval_size=eval_size, seed=seed)


def _file_task(
    d: DataConfig, env: EnvConfig, paths: list[str], seed: int, eval_n: int | None, tokenizer, on_event, context
):
    from rlvr.tasks.files import as_chat, load_problems
    from rlvr.tasks.mix import FileTask
    from rlvr.tasks.prompts import limit_prompts

    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        key = "data.files" if d.files else "task.name"
        raise ConfigError(
            f"{key}: {missing[0]!r} is neither a built-in task ({', '.join(sorted(BUILTIN))}, or "
            f"several joined by '+': arithmetic+code) nor an existing data file or directory"
        )
    if eval_n is not None and eval_n > d.eval_size:
        raise ConfigError(
            f"eval.n: {eval_n} held-out problems asked for, but data.eval_size holds out "
            f"{d.eval_size} records of the data files: raise data.eval_size or lower eval.n"
        )
    problems = load_problems(paths, d.on_bad_record, on_event)
    graded = [p for p in problems if p.verifier == "env"]
    if graded and env.name == "single_turn":
        raise ConfigError(
            f"{graded[0].metadata.get('where', graded[0].id)}: verifier 'env' is an episode's success, "
            "but env.name=single_turn has no environment: set env.name"
        )
    if d.chat:
        problems = as_chat(problems, d.system_prompt)
    elif d.system_prompt:
        raise ConfigError("data.system_prompt: needs data.chat=true (a system message goes through the chat template)")
    task = FileTask(problems, mix=d.mix, eval_size=d.eval_size, seed=seed)
    if tokenizer is not None:
        limit_prompts(task, tokenizer, d.max_prompt_tokens, d.on_long_prompt, on_event, context)
    if on_event:
        on_event("data_loaded", files=[str(p) for p in paths], **task.describe())
    return task


def _verifiers_task(data: DataConfig, env: EnvConfig, seed: int, tokenizer, on_event, context):
    """The rows of a verifiers environment: its eval dataset held out, else data.eval_size of its rows."""
    from rlvr.tasks.mix import FileTask
    from rlvr.tasks.prompts import limit_prompts

    if data.on_long_prompt == "truncate":
        raise ConfigError(
            "data.on_long_prompt: a verifiers environment's rollout sends its own prompt, which rlvr "
            "cannot cut: use skip or error"
        )
    chat = tokenizer is None or getattr(tokenizer, "chat_template", None) is not None
    train, held_out = verifiers_hub.problems(env, chat)
    task = FileTask(train, mix={}, eval_size=data.eval_size, seed=seed, held_out=held_out)
    if tokenizer is not None:
        limit_prompts(task, tokenizer, data.max_prompt_tokens, data.on_long_prompt, on_event, context)
    if on_event:
        on_event("data_loaded", files=[env.name], **task.describe())
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
