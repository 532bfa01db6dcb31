"""Episodes whose environment failed: marked, counted, logged once, and a run stopped when its
environment fails on every episode the same way.

An episode is marked in its `env_info`: `error` (the environment's class, the method, what went
wrong) and `env_error` (the kind: raised, exit, bad_result, timeout, died, killed, unpicklable).
The reward then marks the sample invalid (never rewarded, never in the loss) and the step's
metrics count it (`rollout/env_error_frac`, `rollout/env_error/<kind>_frac`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from rlvr.configlib import RunFailed

log = logging.getLogger("rlvr.envs")

FAULT_KINDS = ("raised", "exit", "bad_result", "timeout", "died", "killed", "unpicklable")


class EnvironmentBroken(RunFailed):
    """The same failure on every one of the run's first env.fail_fast episodes."""


def describe(cls: str, fault: dict[str, Any]) -> str:
    """One line: which method of which class, and what went wrong."""
    where, kind, what, message = f"{cls}.{fault['method']}", fault["kind"], fault["type"], fault["message"]
    if kind == "bad_result":
        return message if message.startswith(cls) else f"{where}: {message}"
    if kind == "timeout":
        return f"{where} {message}"
    if kind == "exit":
        return f"{where} called sys.exit ({message or 'no code'}); an environment ends an episode with done=True"
    if kind in ("died", "killed", "unpicklable"):
        return f"{where}: {message}"
    return f"{where} raised {what}: {message}"


def record_fault(traj, fault: dict[str, Any]) -> None:
    """Mark a trajectory's episode failed (the first failure is the one kept)."""
    if "env_error" in traj.info:
        return
    traj.info["error"] = describe(traj.handle.name, fault)
    traj.info["env_error"] = fault["kind"]
    traj.info["env_fault"] = {"class": traj.handle.name, **fault}
    traj.finish = "env_done"


def overran(traj, spec, host, method: str, waited_s: float) -> None:
    """An environment call past its deadline: the episode ends, marked; the host abandons it."""
    host.abandon(traj.handle)
    bound = spec.reset_timeout_s if method in ("reset", "close") else spec.step_timeout_s
    why = (
        f"did not answer within {bound:g} s (env.{'reset' if method != 'step' else 'step'}_timeout_s)"
        if waited_s >= bound - 1e-3
        else f"used up the episode's {spec.episode_timeout_s:g} s of environment time (env.episode_timeout_s)"
    )
    record_fault(traj, {"method": method, "kind": "timeout", "type": "", "message": why})


class FaultLedger:
    """Across a run's rollouts: each kind of failure logged once; EnvironmentBroken when the first
    `fail_fast` episodes all failed the same way (0: never)."""

    def __init__(self, fail_fast: int = 16) -> None:
        self.fail_fast = fail_fast
        self.seen = 0
        self.first: tuple | None = None
        self.same = True
        self.logged: set[tuple] = set()

    def record(self, completions: Sequence[Any]) -> None:
        for c in completions:
            fault = c.env_info.get("env_fault")
            sig = None if fault is None else (fault["class"], fault["method"], fault["kind"], fault["type"])
            if sig is not None and sig not in self.logged:
                self.logged.add(sig)
                log.warning(
                    "environment failure (logged once per kind; every one is counted in "
                    "rollout/env_error_frac): problem %s: %s",
                    c.problem_id,
                    c.env_info["error"],
                )
            if self.seen < self.fail_fast:
                self.seen += 1
                if sig is None or (self.first is not None and sig != self.first[0]):
                    self.same = False
                elif self.first is None:
                    self.first = (sig, c.env_info["error"])
                if self.seen == self.fail_fast and self.same:
                    raise EnvironmentBroken(
                        f"{self.first[1]} (on each of the first {self.fail_fast} episodes; "
                        "env.fail_fast=0 goes on regardless)"
                    )
