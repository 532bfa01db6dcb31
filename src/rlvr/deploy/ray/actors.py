"""The modules as Ray actors. Each takes and returns records (Problem, Completion, RewardResult).

Workers are stateless from the caller's side: every call names the start checkpoint and the
weight version it needs, and a worker that Ray restarted after its process died sets itself up
again on its next call. That is what lets the driver re-issue a lost call as it was.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence

import ray
import torch

from rlvr.deploy.ray.devices import Placed, pool_device
from rlvr.deploy.ray.parts import ActorParts
from rlvr.deploy.ray.replies import ComponentScores, LogProbs, Sampled, Scored, SpeculationChecked, WeightsLoaded
from rlvr.deploy.ray.shipping import RunFiles, Shipped, materialize
from rlvr.deploy.ray.sync import OFFERS, WeightHandle, load_published
from rlvr.inference.reward_models import learned_components
from rlvr.kernels import keep_freed_memory
from rlvr.models import load_tokenizer
from rlvr.records import Completion, Problem, RewardResult
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.controls import NewWeights, Speculative
from rlvr.rollout.speculative import check_speculative
from rlvr.tools import ToolCall, ToolResult, run_tool


def _set_up(threads: int) -> None:
    """An actor's process: its torch threads, and freed memory kept for reuse as the `rlvr` command
    keeps it (rlvr.kernels.keep_freed_memory: the loop engine packs its weights again every decode)."""
    torch.set_num_threads(max(1, threads))
    keep_freed_memory()


TOOL_THREADS = 16
"""Tool calls a reward worker runs at once, beside its scoring (the sandbox pool bounds the programs)."""


def tool_host(workers: Sequence) -> Callable[[ToolCall, float], ToolResult]:
    """Tool calls run on the reward workers, in turn: where the sandbox is, away from the policy's
    process. A worker that fails or does not answer in time answers the model with an error."""
    from ray.exceptions import GetTimeoutError, RayError

    turn = itertools.count()

    def host(call: ToolCall, timeout_s: float) -> ToolResult:
        worker = workers[next(turn) % len(workers)]
        try:  # the worker times the call itself; the slack covers queueing and transport
            return ray.get(worker.run_tool.remote(call, timeout_s), timeout=timeout_s + 30.0)
        except GetTimeoutError:
            msg = f"{call.name} did not answer within {timeout_s:g} s (reward worker)"
            return ToolResult(f"error: {msg}", False, msg, timeout=True)
        except RayError as exc:
            msg = f"the reward worker running {call.name} failed ({type(exc).__name__})"
            return ToolResult(f"error: {msg}", False, msg)

    return host


class RolloutWorker(Placed):
    """A rollout engine (`rollout.engine`) on a policy copy, on its pool's device, sampling with the
    published weights. Its environments live here; their tool calls run on the reward workers
    (`tool_workers`). With deploy.partial_rollouts, weights the trainer publishes while it samples
    are offered to it (`offer`, beside the sampling) and taken between decode steps."""

    def __init__(self, parts: ActorParts, threads: int, tool_workers: Sequence = ()) -> None:
        _set_up(threads)
        self.parts, self.threads = parts, threads
        self.tool_workers = list(tool_workers)
        self.engine = None
        self.start_key: str | None = None
        self.publication: str | None = None  # the published weights the engine holds; None: those of start_path
        # (the id only: a handle would keep its payload alive in the object store after the next publication)
        self.plain = False  # speculation switched off by the trainer's fallback
        self.offered: WeightHandle | None = None  # the latest publication offered (partial rollouts)
        self.arrived = threading.Event()  # set by `offer`: the engine stops decoding at its next step
        self.offer_lock = threading.Lock()
        self.loads: list[WeightsLoaded] = []  # the weights loaded during the current sample call

    def pid(self) -> int:
        return os.getpid()

    def _build(self, start: Shipped, start_path: str) -> None:
        parts = self.parts
        if parts.engine_name == "vllm":  # the engine loads the weights itself, onto the GPUs Ray shows it
            model, tokenizer = None, load_tokenizer(start_path)
        else:
            model, tokenizer = parts.policy(start_path, pool_device()[1])
            self.weights_device = str(next(model.parameters()).device)
        episodes = parts.episodes(tool_host(self.tool_workers) if self.tool_workers else None)
        if parts.partial_rollouts:
            episodes = dataclasses.replace(episodes, new_weights=NewWeights(self.arrived, self._take_offered))
        self.engine = parts.rollout_engine(model, tokenizer, start_path, episodes)
        self.start_key, self.publication, self.plain = start.key, None, False

    def offer(self, weights: WeightHandle) -> None:
        """Partial rollouts: a publication, offered while this worker may be sampling (called in the
        concurrency group OFFERS, beside `sample`); the engine stops decoding at its next step and
        takes it (`_take_offered`)."""
        with self.offer_lock:
            if self.offered is None or weights.supersedes(self.offered.publication):
                self.offered = weights
                self.arrived.set()

    def _take_offered(self) -> None:
        """In the sampling thread, between decode steps: load the offered weights if they are newer."""
        with self.offer_lock:
            offered = self.offered
            self.arrived.clear()
        if offered is not None and offered.supersedes(self.publication):
            self._load(offered, during_sampling=True)

    def _load(self, weights: WeightHandle, during_sampling: bool = False) -> None:
        self.loads.append(load_published(self.engine, weights, during_sampling))
        self.publication = weights.publication

    def sample(
        self,
        start: Shipped,
        weights: WeightHandle,
        problems: Sequence[Problem],
        params: SamplingParams,
        group_offset: int,
        rng: dict,
        speculate: bool = True,
    ) -> Sampled:
        """rng: {'state': torch RNG state} continues the trainer's stream (exact embedded equivalence),
        or {'seed': int} for a shard of its own; the state after sampling comes back."""
        t0 = time.time()
        torch.set_num_threads(max(1, self.threads))  # this call's thread (with partial rollouts the actor is threaded)
        if self.start_key != start.key:
            self._build(start, str(materialize(start)))  # this node's copy: no shared filesystem assumed
        if speculate is False and isinstance(self.engine, Speculative) and not self.plain:
            self.engine.without_speculation()  # the trainer's fallback: acceptance stayed too low
            self.plain = True
        self.loads = []
        with self.offer_lock:  # a publication offered since the call was made is newer: start with it
            if self.offered is not None and self.offered.supersedes(weights.publication):
                weights = self.offered
            self.arrived.clear()
        if self.publication != weights.publication:  # a version number may come again after a rollback
            self._load(weights)
        if rng.get("state") is not None:
            torch.set_rng_state(rng["state"])
        else:
            torch.manual_seed(rng["seed"])
        completions = self.engine.generate(problems, params, group_offset=group_offset)
        return Sampled(
            completions=completions,
            rng_state=torch.get_rng_state(),
            weights_loaded=self.loads,
            speculative=dict(self.engine.speculative_stats if isinstance(self.engine, Speculative) else {}),
        ).timed(t0)

    def check_speculation(
        self, start: Shipped, problems: Sequence[Problem], params: SamplingParams
    ) -> SpeculationChecked:
        """rlvr.rollout.speculative's fidelity check, here where the engine samples: one calibration
        batch with the speculative engine and one with plain decoding of the same weights, both
        scored by this worker's policy copy; a ConfigError (the run stops) when they disagree."""
        t0 = time.time()
        spec = self.parts.speculative
        path = str(materialize(start))
        if self.start_key != start.key:  # built by the first sample call otherwise; the check needs it now
            self._build(start, path)
        scorer = getattr(self.engine, "model", None)  # the loop engine's own copy holds the start weights
        if scorer is None:  # vLLM keeps its weights to itself: a copy to score with
            scorer, _ = self.parts.policy(path, pool_device()[1])
        tokenizer = self.engine.tokenizer
        stats = check_speculative(
            self.engine,
            HFEngine(scorer, tokenizer, dtype=self.parts.dtype),
            scorer,
            tokenizer,
            problems,
            params,
            method=spec.method,
            tolerance=spec.check_tolerance,
        )
        return SpeculationChecked(stats=stats).timed(t0)


class RewardWorker(Placed):
    """Rule rewards (math verification, the code sandbox) on CPU cores, whole groups at a time, and
    the rollout workers' tool calls (in a concurrency group of their own, beside the scoring)."""

    def __init__(self, parts: ActorParts, threads: int) -> None:
        _set_up(threads)
        self.parts = parts
        self.reward = parts.rule_reward()
        self._tools: dict | None = None
        self._tools_lock = threading.Lock()

    @ray.method(concurrency_group="tools")
    def run_tool(self, call: ToolCall, timeout_s: float) -> ToolResult:
        with self._tools_lock:
            if self._tools is None:
                self._tools = self.parts.tools()
        return run_tool(self._tools, call, timeout_s)

    def pid(self) -> int:
        return os.getpid()

    def score(self, problems: Sequence[Problem], texts: Sequence[str], group_ids: Sequence[int], env=None) -> Scored:
        t0 = time.time()
        try:
            results = self.reward.score(problems, texts, group_ids=group_ids, env=env)
        except Exception as exc:  # a reward failure degrades to invalid samples, never a stalled step
            results = [RewardResult.invalid(f"reward worker failed: {type(exc).__name__}: {exc}") for _ in texts]
        return Scored(results=results).timed(t0)


class InferenceWorker(Placed):
    """The inference module on its pool's device: frozen reference log-probs of completions (when
    algo.beta > 0), the distillation teacher's (algo.distill.teacher) and the learned rewards
    (`reward.models`, `reward.judges`), each loaded on first use."""

    def __init__(self, parts: ActorParts, threads: int) -> None:
        _set_up(threads)
        self.parts = parts
        self.ref = None
        self.start_key: str | None = None
        self.teacher = None
        self.learned: dict | None = None

    def pid(self) -> int:
        return os.getpid()

    def logprobs(self, start: Shipped, completions: Sequence[Completion]) -> LogProbs:
        t0 = time.time()
        if self.start_key != start.key:
            start_path = str(materialize(start))
            model, tokenizer = self.parts.policy(start_path, pool_device()[1])
            self.weights_device = str(next(model.parameters()).device)
            self.ref = self.parts.reference(model, tokenizer)
            self.start_key = start.key
        return LogProbs(logp=self.ref.logprobs(completions)).timed(t0)

    def teacher_logprobs(self, start: Shipped, teacher: Shipped, completions: Sequence[Completion]) -> LogProbs:
        """The teacher's log-probs of the completions, from this node's copy of its directory (the
        trainer checked its tokenizer against the policy's, `start`)."""
        t0 = time.time()
        if self.teacher is None:
            tokenizer = load_tokenizer(materialize(start))
            self.teacher = self.parts.teacher(tokenizer, pool_device()[1], str(materialize(teacher)))
        return LogProbs(logp=self.teacher.logprobs(completions)).timed(t0)

    def _learned(self, shipped: dict[str, Shipped] | None = None) -> dict:
        """The learned components, built on first use from this node's copies of their directories
        (`shipped`: reward model and local judge directories, by component name)."""
        if self.learned is None:
            r = self.parts.reward
            local = {name: str(materialize(s)) for name, s in (shipped or {}).items()}
            models = {n: dataclasses.replace(m, path=local.get(n, m.path)) for n, m in r.models.items()}
            judges = {n: dataclasses.replace(j, model=local.get(n, j.model)) for n, j in r.judges.items()}
            here = dataclasses.replace(r, models=models, judges=judges)
            self.learned = learned_components(here, str(pool_device()[1]))  # 'auto' devices: the pool's
            if self.weights_device is None and r.models:
                self.weights_device = str(pool_device()[1])
        return self.learned

    def score_learned(
        self, name: str, shipped: dict[str, Shipped], problems: Sequence[Problem], texts: Sequence[str]
    ) -> ComponentScores:
        """One learned component's raw scores (an exception in place of a sample's score: invalid),
        and the replies a judge gave (by sample index)."""
        t0 = time.time()
        component = self._learned(shipped)[name]
        scores = component.score(problems, texts)
        return ComponentScores(scores=scores, replies=dict(getattr(component, "replies", {}))).timed(t0)

    def learned_metrics(self, name: str) -> dict:
        return dict(getattr(self._learned()[name], "metrics", dict)())


class TrainerActor(Placed):
    """The embedded GRPO loop (rlvr.assembly.train) with its batches collected on the other actors.
    A pool of N (train.strategy=fsdp) is one torch.distributed group: rank 0 collects the batches,
    every rank trains on its share (rlvr.train.parallel)."""

    def __init__(self, threads: int) -> None:
        _set_up(threads)
        self.weights_device = str(pool_device()[1])

    def pid(self) -> int:
        return os.getpid()

    def address(self) -> tuple[str, int]:
        """This node's address and a free port on it: where the group's rank 0 listens."""
        import socket

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def train(
        self,
        parts: ActorParts,
        files: RunFiles,
        workers: dict,
        pending_events: list[dict],
        attempt: int,
        rank: int = 0,
        world: int = 1,
        master: tuple[str, int] | None = None,
    ) -> dict:
        """files: what the driver shipped; the policy starts from this node's copy of `files.start`."""
        if world > 1:  # the environment a launcher gives a rank (rlvr.train.parallel reads it); Ray shows
            # each actor only its own GPU, as device 0; its CPU threads are its pool's (set above)
            os.environ.update(
                {
                    "RANK": str(rank),
                    "WORLD_SIZE": str(world),
                    "MASTER_ADDR": master[0],
                    "MASTER_PORT": str(master[1]),
                    "LOCAL_RANK": "0",
                }
            )
        source = parts.batch_source(workers, pending_events, attempt, files) if rank == 0 else None
        try:  # on the pool's device (train.device=auto: its GPU, else the CPU)
            return parts.train(
                source.bind if source else (lambda log: None), materialize(files.start), pool_device()[1]
            )
        finally:
            if source is not None:
                source.close()


def actor_class(cls, max_restarts: int, partial_rollouts: bool = False):
    """`cls` as a Ray actor that Ray restarts when its process dies; the caller re-issues the lost call
    (max_task_retries=0), so every re-issue is seen and logged. A rollout worker under partial
    rollouts takes offers in a thread of their own (OFFERS); otherwise it runs one call at a time."""
    groups = (
        {"concurrency_groups": {"tools": TOOL_THREADS}}
        if cls is RewardWorker
        else {"concurrency_groups": {OFFERS: 1}}
        if cls is RolloutWorker and partial_rollouts
        else {}
    )
    return ray.remote(max_restarts=max_restarts, max_task_retries=0, **groups)(cls)
