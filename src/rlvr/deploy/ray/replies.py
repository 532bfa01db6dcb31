"""What the Ray workers answer, one record per call (rlvr.deploy.ray.actors -> rlvr.deploy.ray.source).

Every reply says how long the worker was busy on the call and which process answered (a new pid:
Ray restarted the worker); a reply the driver makes up for a call that timed out or kept failing
carries neither (busy_s 0, pid None).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch

from rlvr.records import Completion, RewardResult


@dataclass(kw_only=True)
class Reply:
    busy_s: float = 0.0
    pid: int | None = None

    def timed(self, t0: float) -> Reply:
        """This reply stamped with the seconds since t0 and this process's pid (in the worker)."""
        self.busy_s, self.pid = time.time() - t0, os.getpid()
        return self


@dataclass(kw_only=True)
class WeightsLoaded:
    """A rollout worker took a new weight publication: how long the load took and whether the
    checksum of what the engine holds matched the trainer's (rlvr.deploy.ray.sync.load_published)."""

    load_s: float
    checksum_ok: bool
    during_sampling: bool = False
    """Taken between decode steps of the trajectories in hand (partial rollouts)."""


@dataclass(kw_only=True)
class Sampled(Reply):
    """RolloutWorker.sample: the completions, the RNG state after sampling (the trainer's stream
    continues from it), the weights loaded during the call (none: it had them; with partial
    rollouts, also those taken while it sampled) and the draft acceptance of speculative decoding
    ({} without it)."""

    completions: list[Completion]
    rng_state: torch.Tensor
    weights_loaded: list[WeightsLoaded] = field(default_factory=list)
    speculative: dict[str, float] = field(default_factory=dict)


@dataclass(kw_only=True)
class SpeculationChecked(Reply):
    """RolloutWorker.check_speculation: rlvr.rollout.speculative.check_speculative's figures."""

    stats: dict[str, float]


@dataclass(kw_only=True)
class Scored(Reply):
    """RewardWorker.score: a RewardResult per text, in order."""

    results: list[RewardResult]


@dataclass(kw_only=True)
class LogProbs(Reply):
    """InferenceWorker.ref_logprobs / teacher_logprobs: (N, T) log-probs of the completions' tokens."""

    logp: torch.Tensor


@dataclass(kw_only=True)
class ComponentScores(Reply):
    """InferenceWorker.score_learned: one learned component's score per text (or the error that kept
    it from one), and a judge's raw replies by index (for the samples file)."""

    scores: list[float | Exception]
    replies: dict[int, str] = field(default_factory=dict)
