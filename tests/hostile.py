"""Environments and tools written the way users' really are: buggy, slow, chatty, exiting. Kept in a
module of their own with light imports, so the worker processes that host them start fast."""

from __future__ import annotations

import math
import os
import sys
import time
import zlib

from rlvr.envs import Environment, StepResult

FLOOD = "x" * 10_000_000
SURROGATE = "bad \udc80 text"


class Numpyish:
    """A stand-in for a numpy array of one bool: truthy-ambiguous, shape (1,)."""

    shape, dtype = (1,), None

    def __bool__(self):
        raise ValueError("The truth value of an array with more than one element is ambiguous")


def _spin() -> None:
    while True:
        pass


# what each behaviour does, by method; the default of every method is a good answer
BEHAVIOURS = {
    "ok": {},
    "init_raise": {"__init__": lambda: 1 / 0},
    "reset_raise": {"reset": lambda: {}["missing"]},
    "step_raise": {"step": lambda: [][1]},
    "close_raise": {"close": lambda: (_ for _ in ()).throw(RuntimeError("close failed"))},
    "reset_hang": {"reset": lambda: time.sleep(3600)},
    "step_hang": {"step": lambda: time.sleep(3600)},
    "step_spin": {"step": _spin},
    "exit": {"step": lambda: sys.exit(0)},
    "tuple": {"step": lambda: ("obs", 1.0, True, False, {})},
    "none": {"step": lambda: None},
    "nan": {"step": lambda: StepResult(None, {"score": math.nan}, True)},
    "inf": {"step": lambda: StepResult(None, {"score": math.inf}, True)},
    "str_component": {"step": lambda: StepResult(None, {"score": "1.0"}, True)},
    "info_none": {"step": lambda: StepResult(None, {"score": 1.0}, True, None)},
    "done_array": {"step": lambda: StepResult(None, {"score": 1.0}, Numpyish())},
    "messages_str": {"step": lambda: StepResult("hello", {"score": 1.0})},
    "reset_int": {"reset": lambda: 42},
    "flood": {"step": lambda: StepResult([{"role": "user", "content": FLOOD}], {"score": 1.0})},
    "surrogate": {"step": lambda: StepResult([{"role": "user", "content": SURROGATE}], {"score": 1.0})},
    "return_nan": {"step": lambda: StepResult(None, {"score": 1.0}, True, {"return": math.nan})},
    "os_exit": {"step": lambda: os._exit(3)},
}


class Hostile(Environment):
    """Does what BEHAVIOURS[problem.metadata['do']] says; otherwise a two-turn episode scoring 1."""

    components = {"score": 1.0}
    max_turns = 2

    def __init__(self, settings=None, *, do: str = "ok", **context) -> None:
        super().__init__(settings, **context)
        self.do = BEHAVIOURS[do]
        self.turns = 0
        self._act("__init__", None)

    def _act(self, method: str, default):
        action = self.do.get(method)
        return default if action is None else action()

    def reset(self, problem, seed):
        return self._act("reset", problem.prompt)

    def step(self, assistant_turn: str) -> StepResult:
        self.turns += 1
        ok = StepResult(
            [{"role": "user", "content": "ok\n"}] if self.turns < 2 else None,
            {"score": 1.0},
            self.turns >= 2,
            {"success": True},
        )
        return self._act("step", ok)

    def close(self) -> None:
        self._act("close", None)


def make_hostile(problem) -> Hostile:
    return Hostile(do=problem.metadata.get("do", "ok"))


class Flaky(Environment):
    """One step, graded by the verifier, with a `bonus` component: by a hash of the problem and the
    turn, it raises on a third of its episodes, hangs on a tenth and returns a NaN on another tenth."""

    components = {"bonus": 0.0}
    max_turns = 1
    settings_keys = frozenset()

    def step(self, assistant_turn: str) -> StepResult:
        draw = zlib.crc32(assistant_turn.encode()) % 30
        if draw < 10:
            raise KeyError("a bug on a third of the episodes")
        if draw < 13:
            time.sleep(3600)
        if draw < 16:
            return StepResult(None, {"bonus": math.nan}, True)
        return StepResult(None, {"bonus": 0.0}, True)


class Steady(Environment):
    """Flaky's well-behaved twin: the same episodes, every step answered."""

    components = {"bonus": 0.0}
    max_turns = 1
    settings_keys = frozenset()

    def step(self, assistant_turn: str) -> StepResult:
        return StepResult(None, {"bonus": 0.0}, True)


class Slow(Environment):
    """Three turns, each step half a second: episodes that outlast a tiny model's update."""

    components = {"bonus": 0.0}
    max_turns = 3
    settings_keys = frozenset()

    def step(self, assistant_turn: str) -> StepResult:
        time.sleep(0.5)
        return StepResult([{"role": "user", "content": " again:"}], {"bonus": 0.0}, False)


class Patient(Environment):
    """Four turns, each step answered at once: HangsLater's well-behaved twin."""

    components = {"bonus": 0.0}
    max_turns = 4
    settings_keys = frozenset()
    turn = 0

    def step(self, assistant_turn: str) -> StepResult:
        self.turn += 1
        return StepResult([{"role": "user", "content": " again:"}], {"bonus": 0.0}, False)


class HangsLater(Patient):
    """Patient, but by a hash of the turn's text and number it hangs on one step in eight, at any turn:
    a rollout's episodes hang at different turns."""

    def step(self, assistant_turn: str) -> StepResult:
        if zlib.crc32(f"{self.turn}:{assistant_turn}".encode()) % 8 == 0:
            time.sleep(3600)
        return super().step(assistant_turn)


class AlwaysTuple(Environment):
    max_turns = 2

    def step(self, assistant_turn: str):
        return "obs", 0.0, False, False, {}


# --- tools --------------------------------------------------------------------------------------


def spin(n: int) -> str:
    """Burn the CPU forever.

    Args:
        n: Ignored.
    """
    _spin()
    return "never"


def shout(n: int) -> str:
    """Raise an exception with a very long message.

    Args:
        n: Megabytes of message.
    """
    raise ValueError("A" * (n * 1_000_000))


def odd(n: int) -> object:
    """Return something that is not text or JSON.

    Args:
        n: Ignored.
    """
    return object()


def leave(n: int) -> str:
    """Exit the process it runs in.

    Args:
        n: The exit code; negative: sys.exit, else os._exit.
    """
    if n < 0:
        sys.exit(-n)
    os._exit(n)


def garble(n: int) -> str:
    """Return text with a lone surrogate, n times over.

    Args:
        n: Repeats.
    """
    return SURROGATE * n


def exiting_scorer(steps, problem):
    """A process scorer (reward.process.scorer) that exits the process it runs in: the trainer's."""
    sys.exit(0)
