"""Tasks: where problems come from."""

from __future__ import annotations

from rlvr.tasks.arithmetic import ArithmeticTask

BUILTIN = {"arithmetic"}


def build_task(cfg) -> ArithmeticTask:
    t = cfg.task
    if t.name == "arithmetic":
        return ArithmeticTask(min_digits=t.min_digits, max_digits=t.max_digits, ops=tuple(t.ops),
                              eval_size=max(t.eval_size, cfg.eval.n), seed=cfg.seed)
    from rlvr.configlib import ConfigError
    raise ConfigError(f"task.name: unknown task {t.name!r}; built-in tasks: {sorted(BUILTIN)}")


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
