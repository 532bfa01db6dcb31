"""Composition: named components, weighted, optionally standardised within each group.

    reward = build_reward(cfg.reward, env_components)
    results = reward.score(problems, texts, group_ids=None, env=None)   # one RewardResult per text

Components: `format` (FormatCheck), `correct` (the outcome, from the problem's
verifier), `process` (only when weighted), and the environment's own (summed over
an episode's steps, `env` = [(components, info)] per text, rlvr.envs). `total` is the
weighted sum. Verifier 'env' scores `correct` from the episode's `success`. Any
exception or timeout in a component, or an environment that failed, marks that
sample invalid (total 0, excluded from the loss, counted in `reward/invalid_frac`);
`score` never raises for a sample's sake.
"""

from __future__ import annotations

import importlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Protocol

from rlvr.config.reward import RewardConfig
from rlvr.configlib import ConfigError, import_object
from rlvr.records import Problem, RewardResult
from rlvr.rewards.format import FormatCheck
from rlvr.rewards.math_verifier import MathVerifier
from rlvr.rewards.process import process_score
from rlvr.rewards.scorer import EnvOutcome
from rlvr.algos.standardize import standardize


class Verifier(Protocol):
    def verify(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[RewardResult]: ...


def _code_verifier(cfg: RewardConfig) -> Verifier:
    # The sandbox is another module's concern; import it only when a code problem shows up.
    module = importlib.import_module("rlvr.sandbox.verifier")
    return module.CodeVerifier(cfg.code)


VERIFIERS: dict[str, Any] = {  # Problem.verifier -> its builder(reward config); a data file's records name these
    "math": lambda cfg: MathVerifier(cfg.math),
    "code": _code_verifier,
}


class _Unavailable:
    def __init__(self, error: str) -> None:
        self.error = error

    def verify(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[RewardResult]:
        return [RewardResult.invalid(self.error, {"correct": 0.0}) for _ in texts]


def env_outcomes(completions: Sequence[Any]) -> list[EnvOutcome] | None:
    """Each trajectory's environment outcome, for `Reward.score(env=...)`; None when no environment
    reported anything (single-turn episodes), so nothing more travels."""
    out = [(c.env_components, c.env_info) for c in completions]
    multi = any(
        comp or info or c.finish_reason in ("env_done", "max_turns") for c, (comp, info) in zip(completions, out)
    )
    return out if multi else None


def env_kwargs(completions: Sequence[Any]) -> dict[str, Any]:
    """`env=` for Reward.score when an environment reported anything, else nothing (any scorer with
    the plain `score(problems, texts, group_ids)` keeps working for single-turn rollouts)."""
    outcomes = env_outcomes(completions)
    return {} if outcomes is None else {"env": outcomes}


class _EnvVerifier:
    """Verifier 'env': `correct` is the episode's success, as its environment reported it, or its
    `score` where it reports one (a verifiers rubric's reward)."""

    def verify(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[RewardResult]:
        return self.verify_outcomes([None] * len(texts))

    def verify_outcomes(self, outcomes: Sequence[EnvOutcome | None]) -> list[RewardResult]:
        out = []
        for o in outcomes:
            if o is None:  # no environment answered (the batch's first turns were all cut): no success
                out.append(RewardResult(0.0, {"correct": 0.0}, info={"return": None, "no_outcome": True}))
            else:
                info = o[1]
                value = float(info["score"]) if "score" in info else 1.0 if info.get("success") else 0.0
                out.append(RewardResult(value, {"correct": value}, info={"return": o[1].get("return")}))
        return out


class Reward:
    def __init__(self, cfg: RewardConfig, env_components: dict[str, float] | None = None) -> None:
        self.cfg = cfg
        self.env_components = dict(env_components or {})
        self.weights = {**self.env_components, **cfg.weights}  # the environment's defaults, overridden by yours
        known = {"format", "correct", "process"} | set(self.env_components)
        unknown = sorted(set(self.weights) - known)
        if unknown:
            raise ValueError(
                f"reward.weights: unknown component(s) {unknown}; the components are {', '.join(sorted(known))}"
            )
        self.format = FormatCheck(cfg.format)
        self._verifiers: dict[str, Verifier] = {}
        try:
            self._process_scorer = (
                None
                if cfg.process.scorer == "arithmetic"
                else import_object(cfg.process.scorer, "reward.process.scorer")
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def verifier(self, name: str) -> Verifier:
        if name not in self._verifiers:
            if name not in VERIFIERS:
                self._verifiers[name] = _Unavailable(
                    f"unknown verifier {name!r}; known verifiers: {', '.join(sorted(VERIFIERS))}"
                )
            else:
                try:
                    self._verifiers[name] = VERIFIERS[name](self.cfg)
                except ImportError as exc:
                    self._verifiers[name] = _Unavailable(
                        f"verifier {name!r} is not available ({exc}); "
                        f"{'the code sandbox (rlvr.sandbox.verifier) is not installed' if name == 'code' else ''}"
                    )
        return self._verifiers[name]

    def _outcomes(
        self, problems: Sequence[Problem], texts: Sequence[str], env: Sequence[EnvOutcome] | None
    ) -> list[RewardResult]:
        by_verifier: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(problems):
            by_verifier[p.verifier].append(i)
        out: list[RewardResult | None] = [None] * len(texts)
        for name, idx in by_verifier.items():
            try:
                if name == "env":
                    res = self.verifier(name).verify_outcomes([env[i] if env else None for i in idx])
                else:
                    res = self.verifier(name).verify([problems[i] for i in idx], [texts[i] for i in idx])
                if len(res) != len(idx):
                    raise RuntimeError(f"verifier {name!r} returned {len(res)} results for {len(idx)} texts")
            except Exception as exc:  # a verifier bug must not stop training: mark the samples
                res = [
                    RewardResult.invalid(f"verifier {name!r} failed: {type(exc).__name__}: {exc}", {"correct": 0.0})
                    for _ in idx
                ]
            for i, r in zip(idx, res):
                out[i] = r
        return [r if r is not None else RewardResult.invalid("not scored") for r in out]

    def score(
        self,
        problems: Sequence[Problem],
        texts: Sequence[str],
        group_ids: Sequence[Any] | None = None,
        env: Sequence[EnvOutcome] | None = None,
    ) -> list[RewardResult]:
        """One result per text, same order. `group_ids` is needed only for cfg.normalize ==
        'group'; without it each problem id is its own group. `env`: each text's episode outcome
        (env_outcomes), for the environment's components and verifier 'env'."""
        if len(problems) != len(texts) or (env is not None and len(env) != len(texts)):
            raise ValueError(f"score: {len(problems)} problems, {len(texts)} texts, {len(env or texts)} outcomes")
        results = self._outcomes(problems, texts, env)
        for i, (r, text, problem) in enumerate(zip(results, texts, problems)):
            try:
                r.components["format"] = self.format(text, problem.verifier)
                if "process" in self.weights:
                    r.components["process"], r.info["process_checked"] = process_score(
                        text, problem, self._process_scorer, self.cfg.process.aggregate
                    )
            except Exception as exc:
                r.valid, r.error = False, f"format check failed: {type(exc).__name__}: {exc}"
            r.components.setdefault("correct", 0.0)
            components, info = env[i] if env is not None else ({}, {})
            for name in self.env_components:
                r.components[name] = float(components.get(name, 0.0))
            if info.get("error"):  # the environment failed: no fair score for this episode
                r.valid, r.error = False, str(info["error"])
            r.total = self._weighted(r.components) if r.valid else 0.0
        if self.cfg.normalize == "group":
            groups = list(group_ids) if group_ids is not None else [p.id for p in problems]
            self._normalize(results, groups)
        return results

    def _weighted(self, components: dict[str, float]) -> float:
        return float(sum(w * components.get(name, 0.0) for name, w in self.weights.items()))

    def _normalize(self, results: list[RewardResult], groups: list[Any]) -> None:
        valid = [r.valid for r in results]
        normed = {
            name: standardize([r.components.get(name, 0.0) for r in results], groups, valid) for name in self.weights
        }
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


def build_reward(cfg: RewardConfig | None = None, env_components: dict[str, float] | None = None) -> Reward:
    """The reward of `cfg` (a RewardConfig); env_components: the environment's components and their
    default weights (rlvr.envs: env_class(cfg.env.name).components)."""
    return Reward(cfg if cfg is not None else RewardConfig(), env_components)


VERIFIERS["env"] = lambda cfg: _EnvVerifier()
