"""Tasks: where problems come from: the built-in arithmetic task, or data files (rlvr.tasks.files)."""

from __future__ import annotations

from pathlib import Path

from rlvr.tasks.arithmetic import ArithmeticTask

BUILTIN = {"arithmetic"}


def data_paths(cfg) -> list[str]:
    """The data files a run trains on: data.files, or task.name when it is not a built-in task."""
    if cfg.data.files:
        if cfg.task.name not in BUILTIN:
            from rlvr.configlib import ConfigError
            raise ConfigError(f"task.name: {cfg.task.name!r} and data.files are both set; put every file in data.files")
        return list(cfg.data.files)
    return [] if cfg.task.name in BUILTIN else [cfg.task.name]


def has_worked_solutions(cfg) -> bool:
    """Whether the task can feed cold-start SFT: the built-in task can; data files carry no solutions."""
    return not data_paths(cfg)


def build_task(cfg, *, tokenizer=None, on_event=None):
    """The run's task. With a tokenizer, data-file prompts are rendered once up front and the
    prompt-length policy applied; on_event(kind, **fields) receives every skipped or cut record."""
    t = cfg.task
    paths = data_paths(cfg)
    if paths:
        return _file_task(cfg, paths, tokenizer, on_event)
    if t.name == "arithmetic":
        return ArithmeticTask(min_digits=t.min_digits, max_digits=t.max_digits, ops=tuple(t.ops),
                              eval_size=max(t.eval_size, cfg.eval.n), seed=cfg.seed)
    from rlvr.configlib import ConfigError
    raise ConfigError(f"task.name: unknown task {t.name!r}; built-in tasks: {sorted(BUILTIN)}")


def _file_task(cfg, paths: list[str], tokenizer, on_event):
    from rlvr.configlib import ConfigError
    from rlvr.tasks.files import as_chat, load_problems
    from rlvr.tasks.mix import FileTask
    from rlvr.tasks.prompts import limit_prompts

    d = cfg.data
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        key = "data.files" if d.files else "task.name"
        raise ConfigError(f"{key}: {missing[0]!r} is neither a built-in task ({', '.join(sorted(BUILTIN))}) "
                          f"nor an existing data file or directory")
    problems = load_problems(paths, d.on_bad_record, on_event)
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
