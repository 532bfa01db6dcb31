"""The run's guard: alert rules on every step, rollback when a run diverges, fault injection.

In the training loop:

    actor = policy_update(..., fault=guard.fault(step))          # debug.inject_nan_at_step
    trigger = guard.check(step, metrics, monitor_messages)        # alerts go to their sinks
    if trigger is not None:                                       # a rollback rule fired
        step = guard.roll_back(step, trigger, restore, weights)   # last good state, lower lr, new data order

A rollback restores the newest valid checkpoint older than the failing step
(or the state the run started from), multiplies the learning rate by
`rollback.lr_factor`, and reseeds the data order, so the run does not walk
into the same batch again. After `rollback.max_retries` rollbacks the next
trigger fails the run (`RunDiverged`). The bookkeeping (count, lr scale,
data seed, faults fired) survives a rollback and is saved in checkpoints.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.checkpoint import latest_valid, state_digest
from rlvr.config.ops import AlertsConfig, RollbackConfig
from rlvr.ops.alerts import Alert, AlertRules
from rlvr.ops.notify import Notifier, Webhook


class RunDiverged(RuntimeError):
    """A rollback rule fired and no rollback is left (or none is possible)."""


@dataclass
class Snapshot:
    """The state the run started from, in memory: the rollback target before the first checkpoint."""

    step: int
    model_dir: Path
    state: dict[str, Any]

    def trainer_state(self) -> dict[str, Any]:
        return copy.deepcopy(self.state)


class RunGuard:
    def __init__(
        self,
        alerts: AlertsConfig,
        rollback: RollbackConfig,
        log,
        ui,
        *,
        run_name: str,
        ckpt_dir: Path,
        seed: int,
        base_lr: float,
        inject_nan_at_step: int = 0,
    ):
        """alerts, rollback: the sections; ckpt_dir: where rollbacks look for checkpoints; seed: the
        run's (the data order after a rollback is derived from it); base_lr: train.lr;
        inject_nan_at_step: debug.inject_nan_at_step (0: never)."""
        self.alerts, self.rollback, self.log, self.ui = alerts, rollback, log, ui
        self.run_name, self.seed, self.base_lr, self.inject_nan_at_step = run_name, seed, base_lr, inject_nan_at_step
        self.rules = AlertRules(alerts, set(rollback.rules) if rollback.enabled else set())
        webhook = (
            Webhook(alerts.webhook_url, timeout_s=alerts.webhook_timeout_s, backoff_s=alerts.webhook_backoff_s)
            if alerts.webhook_url
            else None
        )
        self.notifier = Notifier(log, ui, webhook, run_name=run_name)
        self.ckpt_dir = Path(ckpt_dir)
        self.start: Snapshot | None = None
        # bookkeeping that outlives a rollback
        self.rollbacks = 0
        self.lr_scale = 1.0
        self.fault_fired = False

    # -- in the loop ---------------------------------------------------------------------------------
    def fault(self, step: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The loss transform for debug.inject_nan_at_step (fires once per run, rollbacks included)."""
        if step != self.inject_nan_at_step or self.fault_fired:
            return None
        self.fault_fired = True
        self.log.event("fault_injected", step=step, fault="nan_loss")
        return lambda loss: loss * float("nan")

    def check(self, step: int, metrics: dict[str, Any], monitor_messages: list[str] = ()) -> Alert | None:
        """Send this step's alerts to their sinks; return the first that calls for a rollback, if any."""
        alerts = self.rules.check(step, metrics, [("stuck_source", m) for m in monitor_messages])
        for alert in alerts:
            self.notifier.send(alert)
        return next((a for a in alerts if a.severity == "critical"), None)

    def data_seed(self, seed: int) -> int:
        """The sampler's seed: a new data order after each rollback."""
        return seed + 7919 * self.rollbacks

    def roll_back(
        self, step: int, trigger: Alert, restore: Callable[[Any], int], weights: Callable[[], dict[str, torch.Tensor]]
    ) -> int:
        """Restore the last good state before `step`; returns the step training continues from.
        weights: the restored model's full state dict (for the event's digest)."""
        if self.rollbacks >= self.rollback.max_retries:
            raise RunDiverged(
                f"step {step}: {trigger.message}; {self.rollbacks} rollback(s) already "
                f"(rollback.max_retries={self.rollback.max_retries}), giving up"
            )
        skipped = []
        target = latest_valid(self.ckpt_dir, before=step, on_skip=lambda p, why: skipped.append(f"{p.name}: {why}"))
        target = target or self.start
        if target is None:
            raise RunDiverged(f"step {step}: {trigger.message}; no checkpoint to roll back to")
        self.rollbacks += 1
        self.lr_scale *= self.rollback.lr_factor
        to = restore(target)
        self.log.rewind(to)
        record = self.log.event(
            "rollback",
            step=step,
            to_step=to,
            rule=trigger.rule,
            reason=trigger.message,
            checkpoint=str(getattr(target, "path", "start of run")),
            rollbacks=self.rollbacks,
            lr_scale=self.lr_scale,
            data_seed=self.data_seed(self.seed),
            skipped_checkpoints=skipped,
            weights_sha256=state_digest(weights()),
            base_lr=self.base_lr * self.lr_scale,
        )
        self.ui.warn(
            f"rolled back from step {step} to step {to} ({trigger.rule}); learning rate x{self.lr_scale:g}, "
            f"new data order; rollback {self.rollbacks}/{self.rollback.max_retries}"
        )
        if self.notifier.webhook is not None:
            self.notifier.webhook.post({"source": "rlvr", "run": self.run_name, **record})
        return to

    # -- state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "rules": self.rules.state_dict(),
            "rollbacks": self.rollbacks,
            "lr_scale": self.lr_scale,
            "fault_fired": self.fault_fired,
        }

    def load_state_dict(self, state: dict[str, Any], *, rules_only: bool = False) -> None:
        """`rules_only`: on a rollback keep the bookkeeping, restore only the rule windows."""
        self.rules.load_state_dict(state["rules"])
        if not rules_only:
            self.rollbacks, self.lr_scale, self.fault_fired = (
                state["rollbacks"],
                state["lr_scale"],
                state["fault_fired"],
            )

    def close(self) -> None:
        self.notifier.close()


def rescale_lr(optimizer: torch.optim.Optimizer, scheduler, factor: float) -> None:
    """Multiply the learning rate now and for the rest of the schedule (any torch LR scheduler)."""
    if factor == 1.0:
        return
    scheduler.base_lrs = [b * factor for b in scheduler.base_lrs]
    for group in optimizer.param_groups:
        group["lr"] *= factor
        if "initial_lr" in group:
            group["initial_lr"] *= factor
    scheduler._last_lr = [g["lr"] for g in optimizer.param_groups]
