"""The `alerts` and `rollback` sections: rules over the metric stream, and what a divergence does."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr.configlib import require

ROLLBACK_RULES = ("nonfinite", "kl", "reward_collapse", "format_errors", "weight_sync", "reward_agreement")


@dataclass
class AlertsConfig:
    """Rules over the metric stream; each raises an alert (console, events.jsonl, webhook) when it
    starts to hold, and again only after it has cleared. A threshold of 0 turns its rule off."""

    kl_max: float = 1.0
    """Rule 'kl': actor/kl (per-token KL to the reference) above this."""
    reward_collapse_frac: float = 0.3
    """Rule 'reward_collapse': reward/mean below this fraction of its average over the last
    alerts.window steps, for alerts.patience steps in a row."""
    reward_collapse_floor: float = 0.1
    """...only once that recent average is at least this (no collapse from nothing)."""
    format_error_jump: float = 0.3
    """Rule 'format_errors': the format-error rate (1 - reward/format/mean) above its recent
    average by more than this, for alerts.patience steps in a row."""
    zero_std_max: float = 0.95
    """Rule 'zero_std': the fraction of groups with no reward variance above this, for
    alerts.window steps in a row (no learning signal)."""
    invalid_max: float = 0.05
    """Rule 'invalid': the fraction of samples whose reward could not be computed (error or
    timeout: reward/invalid_frac, */timeout_rate) above this."""
    reward_agreement_min: float | None = None
    """Rule 'reward_agreement': reward/agreement/mean (the mean rank correlation between the reward
    components over a step's batch, in [-1, 1]) below this for alerts.patience steps in a row: one
    component drifting from the others, a reward-hacking signal. None: off."""
    eval_drops: int = 3
    """Rule 'eval_decline': eval/accuracy fell this many evaluations in a row after rising."""
    throughput_drop_frac: float = 0.5
    """Rule 'throughput': perf/rollout_tok_s below this fraction of its median over the last
    alerts.window steps, for alerts.patience steps in a row."""
    window: int = 20
    """Steps in the 'recent' average or median."""
    patience: int = 3
    """Consecutive steps a noisy rule must hold before it fires."""
    webhook_url: str | None = None
    """POST each alert as JSON to this URL (one attempt each, never retried)."""
    webhook_timeout_s: float = 5.0
    webhook_backoff_s: float = 60.0
    """After a failed POST, alerts in the next N seconds are counted, not sent (no retry storm)."""

    def __post_init__(self) -> None:
        require(self.window >= 2, "window", f"must be >= 2 steps, got {self.window}")
        require(self.patience >= 1, "patience", f"must be >= 1, got {self.patience}")
        require(self.webhook_timeout_s > 0, "webhook_timeout_s", f"must be > 0, got {self.webhook_timeout_s}")
        require(
            self.reward_agreement_min is None or -1 <= self.reward_agreement_min <= 1,
            "reward_agreement_min",
            f"must be a rank correlation in [-1, 1] (or null: off), got {self.reward_agreement_min}",
        )


@dataclass
class RollbackConfig:
    enabled: bool = True
    """Restore the last good checkpoint when a rollback rule fires, instead of training on."""
    rules: list[str] = field(default_factory=lambda: list(ROLLBACK_RULES[:5]))
    """Alert rules that trigger a rollback: any of 'nonfinite', 'kl', 'reward_collapse', 'format_errors',
    'weight_sync' (a rollout engine's weights differ from the trainer's after a sync), 'reward_agreement'."""
    lr_factor: float = 0.5
    """Multiply the learning rate by this after each rollback."""
    max_retries: int = 3
    """Rollbacks allowed in one run; one more divergence then fails the run."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.rules) - set(ROLLBACK_RULES))
        require(not unknown, "rules", f"unknown rule(s) {unknown}; choose from {', '.join(ROLLBACK_RULES)}")
        require(0 < self.lr_factor <= 1, "lr_factor", f"must be in (0, 1], got {self.lr_factor}")
        require(self.max_retries >= 0, "max_retries", f"must be >= 0, got {self.max_retries}")
