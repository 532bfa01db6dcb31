"""Composition: named components, weighted, optionally standardised within each group.

    reward = build_reward(cfg.reward)
    results = reward.score(problems, texts, group_ids=None)   # one RewardResult per text

Components: `format` (FormatCheck), `correct` (the outcome, from the problem's
verifier), `process` (only when weighted). `total` is the weighted sum. Any
exception or timeout in a component marks that sample invalid (total 0,
excluded from the loss, counted in `reward/invalid_frac`); `score` never raises
for a sample's sake.
"""

from __future__ import annotations

import importlib
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Protocol

from rlvr.records import Problem, RewardResult
from rlvr.rewards.config import RewardConfig
from rlvr.rewards.format import FormatCheck
from rlvr.rewards.math_verifier import MathVerifier
from rlvr.rewards.process import process_score


class Verifier(Protocol):
    def verify(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[RewardResult]: ...


def _code_verifier(cfg: RewardConfig) -> Verifier:
    # The sandbox is another module's concern; import it only when a code problem shows up.
    module = importlib.import_module("rlvr.sandbox.verifier")
    return module.CodeVerifier(cfg.code)


VERIFIERS: dict[str, Any] = {  # one per name in rlvr.records.VERIFIER_NAMES
    "math": lambda cfg: MathVerifier(cfg.math),
    "code": _code_verifier,
}


class _Unavailable:
    def __init__(self, error: str) -> None:
        self.error = error

    def verify(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[RewardResult]:
        return [RewardResult.invalid(self.error, {"correct": 0.0}) for _ in texts]


def normalize_groups(values: Sequence[float], group_ids: Sequence[Any], valid: Sequence[bool],
                     eps: float = 1e-6) -> list[float]:
    """Standardise `values` within each group over its valid members: (v - mean) / (std + eps).
    A group whose values are all equal carries no signal for that component: all 0."""
    members: dict[Any, list[int]] = defaultdict(list)
    for i, (g, ok) in enumerate(zip(group_ids, valid)):
        if ok:
            members[g].append(i)
    out = [0.0] * len(values)
    for idx in members.values():
        vs = [values[i] for i in idx]
        mean = sum(vs) / len(vs)
        std = math.sqrt(sum((v - mean) ** 2 for v in vs) / len(vs))
        for i in idx:
            out[i] = 0.0 if std < eps else (values[i] - mean) / (std + eps)
    return out


class Reward:
    def __init__(self, cfg: RewardConfig) -> None:
        self.cfg = cfg
        self.weights = dict(cfg.weights)
        self.format = FormatCheck(cfg.format)
        self._verifiers: dict[str, Verifier] = {}

    def verifier(self, name: str) -> Verifier:
        if name not in self._verifiers:
            if name not in VERIFIERS:
                self._verifiers[name] = _Unavailable(
                    f"unknown verifier {name!r}; known verifiers: {', '.join(sorted(VERIFIERS))}")
            else:
                try:
                    self._verifiers[name] = VERIFIERS[name](self.cfg)
                except ImportError as exc:
                    self._verifiers[name] = _Unavailable(
                        f"verifier {name!r} is not available ({exc}); "
                        f"{'the code sandbox (rlvr.sandbox.verifier) is not installed' if name == 'code' else ''}")
        return self._verifiers[name]

    def _outcomes(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[RewardResult]:
        by_verifier: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(problems):
            by_verifier[p.verifier].append(i)
        out: list[RewardResult | None] = [None] * len(texts)
        for name, idx in by_verifier.items():
            try:
                res = self.verifier(name).verify([problems[i] for i in idx], [texts[i] for i in idx])
                if len(res) != len(idx):
                    raise RuntimeError(f"verifier {name!r} returned {len(res)} results for {len(idx)} texts")
            except Exception as exc:  # a verifier bug must not stop training: mark the samples
                res = [RewardResult.invalid(f"verifier {name!r} failed: {type(exc).__name__}: {exc}",
                                            {"correct": 0.0}) for _ in idx]
            for i, r in zip(idx, res):
                out[i] = r
        return [r if r is not None else RewardResult.invalid("not scored") for r in out]

    def score(self, problems: Sequence[Problem], texts: Sequence[str],
              group_ids: Sequence[Any] | None = None) -> list[RewardResult]:
        """One result per text, same order. `group_ids` is needed only for
        cfg.normalize == 'group'; without it each problem id is its own group."""
        if len(problems) != len(texts):
            raise ValueError(f"score: {len(problems)} problems for {len(texts)} texts")
        results = self._outcomes(problems, texts)
        for r, text, problem in zip(results, texts, problems):
            try:
                r.components["format"] = self.format(text, problem.verifier)
                if "process" in self.weights:
                    r.components["process"], r.info["process_checked"] = process_score(text)
            except Exception as exc:
                r.valid, r.error = False, f"format check failed: {type(exc).__name__}: {exc}"
            r.components.setdefault("correct", 0.0)
            r.total = self._weighted(r.components) if r.valid else 0.0
        if self.cfg.normalize == "group":
            groups = list(group_ids) if group_ids is not None else [p.id for p in problems]
            self._normalize(results, groups)
        return results

    def _weighted(self, components: dict[str, float]) -> float:
        return float(sum(w * components.get(name, 0.0) for name, w in self.weights.items()))

    def _normalize(self, results: list[RewardResult], groups: list[Any]) -> None:
        valid = [r.valid for r in results]
        normed = {name: normalize_groups([r.components.get(name, 0.0) for r in results], groups, valid)
                  for name in self.weights}
        for i, r in enumerate(results):
            if r.valid:
                r.info["normalized"] = {name: normed[name][i] for name in self.weights}
                r.total = float(sum(w * normed[name][i] for name, w in self.weights.items()))

    def metrics(self) -> dict[str, float]:
        """The verifiers' own figures since the last call (the code sandbox's `sandbox/...`: executions/s,
        timeout rate, failures by reason), for the step's metrics."""
        out: dict[str, float] = {}
        for v in self._verifiers.values():
            out.update(getattr(v, "metrics", dict)())
        return out

    def close(self) -> None:
        for v in self._verifiers.values():
            close = getattr(v, "close", None)
            if close is not None:
                close()
        self._verifiers.clear()

    def __enter__(self) -> "Reward":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_reward(cfg: RewardConfig | None = None) -> Reward:
    return Reward(cfg if cfg is not None else RewardConfig())
