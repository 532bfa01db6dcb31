"""Reward metrics per step, per data source and per component, how far the components agree, and
the "stuck source" alert.

    metrics = reward_metrics(problems, results)     # flat dict of floats, namespaced keys
    for message in monitor.update(step, metrics):   # RewardMonitor(stuck_steps=5)
        ...  # the trainer writes it to events.jsonl and the console

Means and stds are over valid samples only (invalid ones are excluded from the
loss too); invalid and parse-failure rates are over all samples.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence

from rlvr.records import Problem, RewardResult


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def source_key(name: str) -> str:
    """Metric keys stay one path segment per name: 'gsm8k/test' -> 'gsm8k_test'."""
    return re.sub(r"[^\w.-]+", "_", name) or "_"


def _block(prefix: str, results: list[RewardResult], out: dict[str, float]) -> None:
    valid = [r for r in results if r.valid]
    out[f"{prefix}mean"], out[f"{prefix}std"] = _mean_std([r.total for r in valid])
    n = max(1, len(results))
    out[f"{prefix}invalid_frac"] = sum(not r.valid for r in results) / n
    out[f"{prefix}parse_failed_frac"] = sum(bool(r.info.get("parse_failed")) for r in results) / n
    for flag in ("multiple_answers", "too_long", "relation", "words"):
        out[f"{prefix}{flag}_frac"] = sum(r.info.get("flag") == flag for r in results) / n
    names = sorted({c for r in results for c in r.components})
    for c in names:
        out[f"{prefix}{c}/mean"], out[f"{prefix}{c}/std"] = _mean_std([r.components.get(c, 0.0) for r in valid])
    if "correct" in names:
        out[f"{prefix}correct_mean"] = out[f"{prefix}correct/mean"]


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank (as scipy.stats.rankdata's default)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i : j + 1]:
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation, or None when either side does not vary (no ranking to compare)."""
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return sum((x - ma) * (y - mb) for x, y in zip(ra, rb)) / math.sqrt(va * vb)


def agreement(results: Sequence[RewardResult]) -> dict[str, float]:
    """How far the reward components agree over a batch: Spearman's rank correlation between each
    pair of components over the valid samples that carry both (`reward/agreement/<a>_vs_<b>`) and
    the mean over the pairs (`reward/agreement/mean`). A pair where a component does not vary in the
    batch has no correlation and is left out; a component drifting away from the others (a learned
    reward the policy games, a format check the verifier disagrees with) shows as a falling value."""
    valid = [r for r in results if r.valid]
    names = sorted({c for r in valid for c in r.components})
    out: dict[str, float] = {}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            both = [r for r in valid if a in r.components and b in r.components]
            rho = spearman([r.components[a] for r in both], [r.components[b] for r in both]) if len(both) > 1 else None
            if rho is not None:
                out[f"reward/agreement/{a}_vs_{b}"] = rho
    if out:
        out["reward/agreement/mean"] = sum(out.values()) / len(out)  # not reward/agreement: a key that is a
        # prefix of others is both a file and a directory in MLflow's file store
    return out


def reward_metrics(problems: Sequence[Problem], results: Sequence[RewardResult]) -> dict[str, float]:
    """`reward/mean`, `reward/std`, `reward/<component>/mean|std`, `reward/invalid_frac`,
    `reward/parse_failed_frac`, `reward/agreement/mean` (and per pair of components), and the same
    per source under `reward/source/<source>/` (plus `.../n` and `.../correct_mean`)."""
    out: dict[str, float] = {}
    results = list(results)
    _block("reward/", results, out)
    out.update(agreement(results))
    by_source: dict[str, list[RewardResult]] = defaultdict(list)
    for p, r in zip(problems, results):
        by_source[p.source].append(r)
    for source, rs in sorted(by_source.items()):
        prefix = f"reward/source/{source_key(source)}/"
        _block(prefix, rs, out)
        out[f"{prefix}n"] = float(len(rs))
    return out


class RewardMonitor:
    """Alerts when one source's outcome reward stays at 0 for `stuck_steps` consecutive
    steps while other sources score: usually a verifier/data mismatch (e.g. golds
    written as "约为3.14" that no answer can match), not a hard data set."""

    _KEY = re.compile(r"^reward/source/(.+)/correct_mean$")

    def __init__(self, stuck_steps: int = 5) -> None:
        self.stuck_steps = stuck_steps
        self._zero_run: dict[str, int] = defaultdict(int)
        self._others_scored: dict[str, bool] = defaultdict(bool)
        self._alerted: set[str] = set()

    def update(self, step: int, metrics: dict[str, float]) -> list[str]:
        """Feed one step's `reward_metrics`; returns alert messages (usually none)."""
        correct = {m.group(1): v for k, v in metrics.items() if (m := self._KEY.match(k))}
        alerts = []
        for source, value in correct.items():
            if value > 0:
                self._zero_run[source] = 0
                self._others_scored[source] = False
                self._alerted.discard(source)
                continue
            self._zero_run[source] += 1
            others = [s for s, v in correct.items() if s != source and v > 0]
            self._others_scored[source] = self._others_scored[source] or bool(others)
            if (
                self._zero_run[source] >= self.stuck_steps
                and self._others_scored[source]
                and source not in self._alerted
            ):
                self._alerted.add(source)
                parse = metrics.get(f"reward/source/{source}/parse_failed_frac", 0.0)
                alerts.append(
                    f"step {step}: source '{source}' has outcome reward 0 for {self._zero_run[source]} "
                    f"consecutive steps while other sources score (parse failures {parse:.0%}); "
                    f"check its gold answers against the verifier: rlvr data audit <file>"
                )
        return alerts

    def state_dict(self) -> dict:
        return {
            "zero_run": dict(self._zero_run),
            "others_scored": dict(self._others_scored),
            "alerted": sorted(self._alerted),
        }

    def load_state_dict(self, state: dict) -> None:
        self._zero_run = defaultdict(int, state.get("zero_run", {}))
        self._others_scored = defaultdict(bool, state.get("others_scored", {}))
        self._alerted = set(state.get("alerted", []))
