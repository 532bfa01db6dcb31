"""Alert rules over the per-step metric stream.

    rules = AlertRules(cfg.alerts, rollback_rules={"nonfinite", "kl"})
    for alert in rules.check(step, metrics):    # usually nothing
        ...                                      # the guard sends it to the sinks

A rule fires when its condition starts to hold (noisy ones after
`alerts.patience` steps in a row) and again only after it has cleared, so a
long problem is one alert, not one per step. Windows ("recent average")
hold the values of earlier healthy steps only: while a rule's condition holds, its window is
frozen, so a collapse is measured against the level before it, not against itself. `state_dict()` is saved in
checkpoints, so a resumed run alerts exactly as the uninterrupted one would.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Literal

from rlvr.config.ops import AlertsConfig

MIN_HISTORY = 2  # steps of history before a reward or format level counts as "recent"
MIN_HISTORY_THROUGHPUT = 5  # the first steps are warm-up (compilation, caches, worker start)
RULES = (
    "nonfinite",
    "kl",
    "reward_collapse",
    "format_errors",
    "stuck_source",
    "zero_std",
    "invalid",
    "eval_decline",
    "throughput",
    "reward_agreement",
    "weight_sync",
    "logprob_parity",
)


@dataclass
class Alert:
    rule: str  # one of RULES
    step: int
    message: str
    severity: Literal["warning", "critical"] = "warning"  # critical: a rollback rule
    value: float | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)


def _num(metrics: dict[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    if isinstance(v, str):  # non-finite values read back from JSON are strings ("nan")
        try:
            return float(v)
        except ValueError:
            return None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class AlertRules:
    def __init__(self, cfg: AlertsConfig, rollback_rules: set[str] | frozenset[str] = frozenset()):
        self.cfg = cfg
        self.rollback_rules = set(rollback_rules)
        w = cfg.window
        self._reward: deque[float] = deque(maxlen=w)
        self._format_err: deque[float] = deque(maxlen=w)
        self._tok_s: deque[float] = deque(maxlen=w)
        self._streak: dict[str, int] = {}
        self._active: set[str] = set()
        self._evals: list[float] = []

    # -- conditions: each returns (holds, value, message) -------------------------------------------
    def _nonfinite(self, m: dict[str, Any]):
        bad = [
            k
            for k in ("actor/loss", "actor/grad_norm", "reward/mean")
            if (v := _num(m, k)) is not None and not math.isfinite(v)
        ]
        skipped = _num(m, "actor/skipped_updates") or 0.0
        if skipped:
            bad.append(f"{int(skipped)} skipped update(s)")
        return bool(bad), None, f"non-finite loss or gradient ({', '.join(bad)})"

    def _kl(self, m: dict[str, Any]):
        kl = _num(m, "actor/kl")
        return (
            (self.cfg.kl_max > 0 and kl is not None and kl > self.cfg.kl_max),
            kl,
            f"KL to the reference {kl} above alerts.kl_max={self.cfg.kl_max}",
        )

    def _reward_collapse(self, m: dict[str, Any]):
        r = _num(m, "reward/mean")
        if r is None or len(self._reward) < MIN_HISTORY or not self.cfg.reward_collapse_frac:
            return False, r, ""
        avg = sum(self._reward) / len(self._reward)
        holds = avg >= self.cfg.reward_collapse_floor and r < self.cfg.reward_collapse_frac * avg
        return (
            holds,
            r,
            (
                f"reward mean {r:.3f} below {self.cfg.reward_collapse_frac:.0%} of its recent "
                f"average {avg:.3f} for {self.cfg.patience} steps"
            ),
        )

    def _format_errors(self, m: dict[str, Any]):
        f = _num(m, "reward/format/mean")
        if f is None or len(self._format_err) < MIN_HISTORY or not self.cfg.format_error_jump:
            return False, None, ""
        err, avg = 1.0 - f, sum(self._format_err) / len(self._format_err)
        return (
            err > avg + self.cfg.format_error_jump,
            err,
            f"format-error rate {err:.0%} jumped above its recent average {avg:.0%}",
        )

    def _zero_std(self, m: dict[str, Any]):
        z = _num(m, "rollout/zero_std_frac")
        return (
            (self.cfg.zero_std_max > 0 and z is not None and z > self.cfg.zero_std_max),
            z,
            (
                f"{z:.0%} of groups have no reward variance (above alerts.zero_std_max={self.cfg.zero_std_max}) "
                f"for {self.cfg.window} steps: little learning signal; try easier data or larger groups"
                if z is not None
                else ""
            ),
        )

    def _invalid(self, m: dict[str, Any]):
        rates = {
            k: v for k in m if k == "reward/invalid_frac" or k.endswith("timeout_rate") if (v := _num(m, k)) is not None
        }
        worst = max(rates.items(), key=lambda kv: kv[1], default=(None, 0.0))
        return (
            (self.cfg.invalid_max > 0 and worst[1] > self.cfg.invalid_max),
            worst[1],
            f"{worst[0]} = {worst[1]:.1%} above alerts.invalid_max={self.cfg.invalid_max:.0%} (rewards erroring or timing out)",
        )

    def _reward_agreement(self, m: dict[str, Any]):
        a, floor = _num(m, "reward/agreement/mean"), self.cfg.reward_agreement_min
        if floor is None or a is None:
            return None  # off, or no pair of components varied this step: neither holds nor clears
        pairs = sorted(
            (v, k.rsplit("/", 1)[1])
            for k in m
            if k.startswith("reward/agreement/") and "_vs_" in k
            if (v := _num(m, k)) is not None
        )
        worst = f" (lowest: {pairs[0][1].replace('_vs_', ' vs ')} {pairs[0][0]:+.2f})" if pairs else ""
        return (
            a < floor,
            a,
            (
                f"reward components disagree: reward/agreement/mean {a:+.2f} below "
                f"alerts.reward_agreement_min={floor:+.2f} for {self.cfg.patience} steps{worst}"
            ),
        )

    def _weight_sync(self, m: dict[str, Any]):
        bad = _num(m, "sync/checksum_mismatch")
        if bad is None:
            return None  # no sync this step
        return (
            bad > 0,
            bad,
            (
                f"the weights a rollout engine holds after the sync ({m.get('sync/method')}) differ from "
                f"the trainer's (checksum, rlvr.rollout.sync): it would sample with weights that are not the policy's"
            ),
        )

    def _logprob_parity(self, m: dict[str, Any]):
        gap = _num(m, "rollout/parity_gap_max")
        if gap is None:
            return None  # nothing on-policy to compare this step
        cause = m.get("rollout/parity_cause")
        return (
            cause is not None,
            gap,
            (
                f"engine/trainer log-prob gap max {gap:.3g} (p99 {_num(m, 'rollout/parity_gap_p99') or 0:.3g}) over "
                f"algo.parity_threshold: cause {cause}: {m.get('rollout/parity_evidence')}"
            ),
        )

    def _eval_decline(self, m: dict[str, Any]):
        acc = _num(m, "eval/accuracy")
        if acc is None or not self.cfg.eval_drops:
            return None  # no evaluation this step: the rule neither holds nor clears
        evals = self._evals + [acc]
        n = self.cfg.eval_drops
        falling = len(evals) > n and all(evals[-i] < evals[-i - 1] for i in range(1, n + 1))
        rose_before = any(b > a for a, b in zip(evals[: -n - 1], evals[1:-n]))
        return (
            falling and rose_before,
            acc,
            f"held-out accuracy fell {n} evaluations in a row after rising (now {acc:.1%})",
        )

    def _throughput(self, m: dict[str, Any]):
        t = _num(m, "perf/rollout_tok_s")
        if t is None or len(self._tok_s) < MIN_HISTORY_THROUGHPUT or not self.cfg.throughput_drop_frac:
            return False, t, ""
        med = statistics.median(self._tok_s)
        return (
            t < self.cfg.throughput_drop_frac * med,
            t,
            f"rollout throughput {t:.0f} tok/s below {self.cfg.throughput_drop_frac:.0%} of its recent median {med:.0f}",
        )

    # -----------------------------------------------------------------------------------------------
    def check(self, step: int, metrics: dict[str, Any], extra: list[tuple[str, str]] = ()) -> list[Alert]:
        """Alerts that start at this step. `extra`: (rule, message) pairs raised elsewhere
        (the reward monitor's stuck sources), sent through the same sinks."""
        patience = {
            "reward_collapse": self.cfg.patience,
            "format_errors": self.cfg.patience,
            "throughput": self.cfg.patience,
            "zero_std": self.cfg.window,
            "reward_agreement": self.cfg.patience,
        }
        conditions = {
            "nonfinite": self._nonfinite,
            "kl": self._kl,
            "reward_collapse": self._reward_collapse,
            "format_errors": self._format_errors,
            "zero_std": self._zero_std,
            "invalid": self._invalid,
            "throughput": self._throughput,
            "eval_decline": self._eval_decline,
            "reward_agreement": self._reward_agreement,
            "weight_sync": self._weight_sync,
            "logprob_parity": self._logprob_parity,
        }
        alerts = []
        for rule, condition in conditions.items():
            outcome = condition(metrics)
            if outcome is None:
                continue
            holds, value, message = outcome
            self._streak[rule] = self._streak.get(rule, 0) + 1 if holds else 0
            if not holds:
                self._active.discard(rule)
            elif self._streak[rule] >= patience.get(rule, 1) and rule not in self._active:
                self._active.add(rule)
                alerts.append(self._alert(rule, step, message, value))
        alerts += [self._alert(rule, step, message, None) for rule, message in extra]
        self._remember(metrics)
        return alerts

    def _alert(self, rule: str, step: int, message: str, value: float | None) -> Alert:
        severity = "critical" if rule in self.rollback_rules else "warning"
        value = value if value is None or math.isfinite(value) else None
        return Alert(rule, step, f"step {step}: {message}", severity, value)

    def _remember(self, m: dict[str, Any]) -> None:
        # a window stays frozen while its rule's condition holds (see the module docstring)
        for key, window, rule in (
            ("reward/mean", self._reward, "reward_collapse"),
            ("perf/rollout_tok_s", self._tok_s, "throughput"),
        ):
            v = _num(m, key)
            if v is not None and math.isfinite(v) and not self._streak.get(rule):
                window.append(v)
        f = _num(m, "reward/format/mean")
        if f is not None and math.isfinite(f) and not self._streak.get("format_errors"):
            self._format_err.append(1.0 - f)
        acc = _num(m, "eval/accuracy")
        if acc is not None:
            self._evals.append(acc)

    def state_dict(self) -> dict[str, Any]:
        return {
            "reward": list(self._reward),
            "format_err": list(self._format_err),
            "tok_s": list(self._tok_s),
            "streak": dict(self._streak),
            "active": sorted(self._active),
            "evals": list(self._evals),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        w = self.cfg.window
        self._reward = deque(state["reward"], maxlen=w)
        self._format_err = deque(state["format_err"], maxlen=w)
        self._tok_s = deque(state["tok_s"], maxlen=w)
        self._streak = dict(state["streak"])
        self._active = set(state["active"])
        self._evals = list(state["evals"])
