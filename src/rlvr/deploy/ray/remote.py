"""The actor pools seen as the modules `collect_batch` takes: the rollout pool as one engine
(`RemoteEngine`), the reward pool as one scorer (`RemoteReward`), the inference pool as the
reference, the teacher and each learned component. Every call goes through its RayBatchSource
(rlvr.deploy.ray.source: re-issued when a worker dies, timed, logged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray
import torch

from rlvr.deploy.ray.replies import ComponentScores, Scored
from rlvr.deploy.ray.sync import WeightHandle
from rlvr.records import Problem, RewardResult
from rlvr.rewards import EnvOutcome


def shards(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges covering n items in at most `parts` non-empty pieces."""
    parts = max(1, min(parts, n))
    cuts = [round(i * n / parts) for i in range(parts + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


class RemoteReference:
    """`ReferenceModel`'s interface (.logprobs) answered by the inference pool."""

    def __init__(self, source) -> None:
        self.source = source

    def logprobs(self, completions) -> torch.Tensor:
        return self.source.logprobs_on_pool(lambda w, part: w.logprobs.remote(self.source.start, part), completions)


class RemoteTeacher:
    """The distillation teacher's `.logprobs`, answered by the inference pool (algo.distill.teacher)."""

    def __init__(self, source) -> None:
        self.source = source

    def logprobs(self, completions) -> torch.Tensor:
        src = self.source
        return src.logprobs_on_pool(
            lambda w, part: w.teacher_logprobs.remote(src.start, src.files.teacher, part), completions
        )


class RemoteLearned:
    """One learned reward component (`reward.models.<name>` or `reward.judges.<name>`) scored on the
    inference pool, replicas in turn. A call that fails or times out makes its samples invalid."""

    def __init__(self, source, name: str, cfg) -> None:
        self.source, self.name, self.cfg = source, name, cfg  # cfg: its section (LearnedReward reads the weight)
        self.turn = 0
        self.replies: dict[int, str] = {}

    def score(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[float | Exception]:
        src, workers = self.source, self.source.workers["inference"]
        j = self.turn % len(workers)
        self.turn += 1
        call = lambda: workers[j].score_learned.remote(self.name, src.files.learned, problems, texts)  # noqa: E731

        def failed(why: str) -> ComponentScores:
            return ComponentScores(scores=[RuntimeError(why)] * len(texts))

        out = src.get("inference", j, call(), call, timeout=src.deploy.reward_timeout_s, fallback=failed)
        self.replies = out.replies
        return out.scores

    def metrics(self) -> dict[str, float]:
        workers = self.source.workers["inference"]
        parts = ray.get([w.learned_metrics.remote(self.name) for w in workers])
        return {k: sum(p.get(k, 0.0) for p in parts) for k in set().union(*parts)} if parts else {}


class RemoteEngine:
    """The rollout pool as one `RolloutEngine`, pinned to the published weights of one version (a
    batch sampled ahead keeps the version it started with, unless partial rollouts take newer ones
    between its decode steps)."""

    def __init__(self, source, handle: WeightHandle | None, step: int) -> None:
        self.source, self.handle, self.step = source, handle, step  # handle None: nothing published yet
        self.version = None if handle is None else handle.version
        self.loads: list[dict] = []
        """The workers' loads of published weights while this engine sampled (load_published's replies)."""

    sync_method = "object_store"
    sync_dtype = None  # each worker checks its own engine's dtype (load_published)

    def load_weights(self, named_tensors, version: int, tied: frozenset[str] = frozenset()) -> None:
        self.handle = self.source.publisher.publish(named_tensors, version, tied)
        self.version = version

    def weights_checksum(self) -> None:
        return None  # known when the workers load them: load_published

    def generate(self, problems, params, *, group_offset: int = 0):
        src = self.source
        workers = src.workers["rollout"]
        parts = shards(len(problems), len(workers))
        exact = src.executor is None and len(parts) == 1  # the trainer's RNG stream, as embedded
        rngs = (
            [{"state": torch.get_rng_state()}]
            if exact
            else [
                {"seed": (src.seed * 1_000_003 + (group_offset + a) * 7919 + j) % 2**62}
                for j, (a, _) in enumerate(parts)
            ]
        )
        calls = [
            lambda j=j, a=a, b=b: workers[j].sample.remote(
                src.start, self.handle, problems[a:b], params, group_offset + a, rngs[j], src.speculate
            )
            for j, (a, b) in enumerate(parts)
        ]
        refs = [call() for call in calls]
        src.inject_kill("rollout", self.step)
        outs = [src.get("rollout", j, refs[j], calls[j]) for j in range(len(parts))]
        if exact:
            torch.set_rng_state(outs[0].rng_state)
        self.loads += [w for out in outs for w in out.weights_loaded]
        stats = [out.speculative for out in outs if out.speculative]
        if stats:  # draft acceptance: the mean over the replicas that sampled speculatively
            with src.lock:
                src.spec_stats = {k: sum(st[k] for st in stats) / len(stats) for k in ("accept_rate", "accept_len")}
        return [c for out in outs for c in out.completions]


class RemoteReward:
    """The reward pool as one scorer (`.score`), whole groups per replica; a call that fails or
    times out scores its samples invalid."""

    def __init__(self, source, weights: dict[str, float]) -> None:
        self.source = source
        self.weights = weights
        """The components' weights, for per-turn credit (env.credit=turn)."""

    def score(
        self,
        problems: Sequence[Problem],
        texts: Sequence[str],
        group_ids: Sequence[Any] | None = None,
        env: Sequence[EnvOutcome] | None = None,
    ) -> list[RewardResult]:
        src, workers = self.source, self.source.workers["reward"]
        starts = [i for i in range(len(group_ids)) if i == 0 or group_ids[i] != group_ids[i - 1]]
        bounds = starts + [len(group_ids)]  # group m is rows bounds[m]:bounds[m + 1]
        parts = [(bounds[a], bounds[b]) for a, b in shards(len(starts), len(workers))]
        calls = [
            lambda j=j, a=a, b=b: workers[j].score.remote(
                problems[a:b], texts[a:b], group_ids[a:b], None if env is None else env[a:b]
            )
            for j, (a, b) in enumerate(parts)
        ]
        refs = [call() for call in calls]
        src.inject_kill("reward", getattr(src.collecting, "step", None))
        outs = []
        for j, (a, b) in enumerate(parts):

            def invalid(why: str, n=b - a) -> Scored:
                return Scored(results=[RewardResult.invalid(why) for _ in range(n)])

            outs.append(src.get("reward", j, refs[j], calls[j], timeout=src.deploy.reward_timeout_s, fallback=invalid))
        return [r for out in outs for r in out.results]
