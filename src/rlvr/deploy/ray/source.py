"""The trainer's batch source on Ray: `collect_batch` with the actor pools as its engine and reward.

`collect_batch` takes any rollout engine and any scorer; here the rollout pool is one
`RemoteEngine` (each call's problems cut into one shard per replica, sampled with the
published weights) and the reward pool one `RemoteReward` (whole groups per call, so group
normalisation is unchanged), both in rlvr.deploy.ray.remote.
A call lost with its worker's process is re-issued as it was (Ray restarts the actor, the
worker sets itself up again) and logged; a reward call that fails or times out scores its
samples invalid. Sync mode with one rollout replica continues the trainer's own torch RNG
stream on the worker, so it samples exactly what the embedded run samples.

Async mode (deploy.async): while the trainer updates on batch t, a background thread collects
batches t+1..t+k (k = deploy.max_staleness) with the weights of version t-1. The queue of
batches ahead is bounded by k, and every call to an actor waits for the previous one on that
actor, so a slow module holds back the others instead of piling up results in memory.
With partial rollouts (deploy.partial_rollouts) each publication is also offered to the rollout
workers at once: a batch being sampled ahead takes it between decode steps of its unfinished
trajectories, every token keeping the version that sampled it (Completion.token_versions) and
its behaviour log-prob, which the update's importance ratio corrects for as for any stale token.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import ray
import torch
from ray.exceptions import GetTimeoutError, RayActorError

from rlvr.config import AlgoConfig, DeployConfig, RolloutConfig
from rlvr.deploy.ray.remote import RemoteEngine, RemoteLearned, RemoteReference, RemoteReward, RemoteTeacher, shards
from rlvr.deploy.ray.replies import Reply
from rlvr.deploy.ray.shipping import RunFiles
from rlvr.deploy.ray.sync import OFFERS, WeightHandle, WeightPublisher
from rlvr.inference.reward_models import LearnedReward
from rlvr.records import Problem
from rlvr.rollout import sampling_params
from rlvr.rollout.sync import tied_names
from rlvr.train.step import StepBatch, collect_batch
from rlvr.train.sync import Synced

MODULES = ("rollout", "reward", "inference")


def select_rows(batch: StepBatch, rows: list[int]) -> StepBatch:
    """The batch restricted to `rows` (whole groups, so the advantages stay those of their group)."""
    idx = torch.tensor(rows, dtype=torch.long)
    view, seq_idx = batch.view.select(rows) if batch.view is not None else (None, idx)
    return dataclasses.replace(
        batch,
        problems=[batch.problems[i] for i in rows],
        completions=[batch.completions[i] for i in rows],
        results=[batch.results[i] for i in rows],
        rewards=batch.rewards[idx],
        valid=batch.valid[idx],
        shaped_rewards=batch.shaped_rewards[idx],
        loss_mask=batch.loss_mask[idx],
        advantages=batch.advantages[idx],
        ref_logp=None if batch.ref_logp is None else batch.ref_logp[seq_idx],
        metrics=dict(batch.metrics),
        view=view,
    )


def within_staleness(batch: StepBatch, version: int, max_staleness: int, group_size: int) -> tuple[StepBatch, int]:
    """Drop every group with a completion more than `max_staleness` versions behind `version`;
    returns the kept batch and the number of groups dropped."""
    n_groups = len(batch.completions) // group_size
    keep = [
        m
        for m in range(n_groups)
        if all(
            version - c.policy_version <= max_staleness
            for c in batch.completions[m * group_size : (m + 1) * group_size]
        )
    ]
    if len(keep) == n_groups:
        return batch, 0
    rows = [m * group_size + j for m in keep for j in range(group_size)]
    return select_rows(batch, rows), n_groups - len(keep)


class RayBatchSource:
    """A `BatchSource` for `rlvr.assembly.train`: batches collected on the actor pools, in sync
    or async mode (batches sampled ahead with a bounded staleness)."""

    def __init__(
        self,
        workers: dict[str, list],
        pending_events: list[dict],
        attempt: int,
        files: RunFiles,
        *,
        deploy: DeployConfig,
        rollout: RolloutConfig,
        algo: AlgoConfig,
        learned: dict[str, Any],
        weights: dict[str, float],
        credit: str,
        steps: int,
        seed: int,
        held_out: Callable[[], list[Problem]],
    ) -> None:
        """files: what the workers load (the start of RL, the learned components, the teacher), as the
        driver shipped it. learned: the learned components' sections by name (reward.models, judges),
        scored on the inference pool; weights: every reward component's (per-turn credit); credit:
        env.credit; steps: train.steps; held_out() -> the problems the speculative check samples."""
        self.workers, self.attempt = workers, attempt
        self.deploy, self.rollout, self.algo, self.credit, self.steps, self.seed = (
            deploy,
            rollout,
            algo,
            credit,
            steps,
            seed,
        )
        self.held_out = held_out
        self.params, self.batch_size = sampling_params(rollout), rollout.batch_size
        self.pending = list(pending_events)
        self.publisher = WeightPublisher()
        self.reward = RemoteReward(self, weights)
        if learned:  # scored on the inference pool, beside the reference
            self.reward = LearnedReward(
                self.reward, {name: RemoteLearned(self, name, c) for name, c in learned.items()}
            )
        self.ref = RemoteReference(self) if algo.beta > 0 else None
        self.teacher = RemoteTeacher(self) if algo.distill.teacher else None
        self.files, self.start = files, files.start
        self.checked = False  # rollout.speculative's fidelity check
        self.lock = threading.Lock()  # events and busy times are written by the prefetch thread too
        self.events: list[dict] = []
        self.busy: dict[str, float] = defaultdict(float)
        self.pids = {m: ray.get([w.pid.remote() for w in workers[m]]) for m in MODULES}
        self.ahead: dict[int, Future] = {}
        self.sampler = None  # the trainer's sampler the batches ahead draw from
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="prefetch") if deploy.async_ else None
        self.last_return: float | None = None
        self.killed: set[str] = set()  # modules whose fault was injected
        self.speculate = True  # rollout.speculative in the workers, until the acceptance fallback
        self.spec_stats: dict[str, float] | None = None  # draft acceptance of the last sampling call
        self.low_accept_steps = 0
        self.collecting = threading.local()  # .step: the step the calling thread collects
        self.log = None
        self.placed = False
        self.staleness_bound = deploy.max_staleness + rollout.sync_every - 1
        """Versions a used completion may lag: the batches sampled ahead, plus the updates a
        rollout.sync_every > 1 lets the published weights fall behind by design."""

    def bind(self, log) -> "RayBatchSource":
        """Called by `train` with its RunLog: events that happened before it (a trainer restart) go in first."""
        self.log = log
        for event in self.pending:
            log.event(**event)
        return self

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)

    # -- the batch `train` asks for once per step

    def collect(self, model, sampler, step: int) -> StepBatch:
        t_enter = time.time()
        d = self.deploy
        if d.kill_trainer_at_step == step and self.attempt == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # fault injection: the driver restarts us from a checkpoint
        if not self.checked and self.rollout.speculative.method != "none":
            self.checked = True
            self._check_speculation()
        version = step - 1  # updates applied so far
        restored = sampler is not self.sampler  # a rollback restored the trainer (weights, a new sampler)
        if restored:
            self._drop_ahead()  # batches sampled ahead came from the abandoned policy and data order
            self.sampler = sampler
        engine = RemoteEngine(self, self.publisher.handle, step)
        published_s = 0.0
        if (
            restored
            or self.publisher.version is None
            or ((step - 1) % self.rollout.sync_every == 0 and self.publisher.version != version)
        ):
            t0 = time.time()  # rollout.sync_every; a rollback republishes
            engine.load_weights(model.state_dict().items(), version, tied_names(model))
            published_s = time.time() - t0
            if d.partial_rollouts:  # to the batches being sampled ahead, between their decode steps
                for worker in self.workers["rollout"]:  # a worker that died has nothing in flight to offer it to
                    worker.offer.options(concurrency_group=OFFERS).remote(engine.handle)
        handle = engine.handle
        dropped = 0
        if self.executor is None:
            batch = self._collect(sampler, step, handle)
        else:
            future = self.ahead.pop(step, None)
            batch = future.result() if future is not None else self._collect(sampler, step, handle)
            for ahead in range(step + 1, min(step + d.max_staleness, self.steps) + 1):
                if ahead not in self.ahead:
                    self.ahead[ahead] = self.executor.submit(self._collect, sampler, ahead, handle)
            batch, dropped = within_staleness(batch, version, self.staleness_bound, self.params.group_size)
            if dropped and not batch.completions:  # nothing fresh enough: sample this step again, now
                batch = self._collect(sampler, step, handle)
        batch.metrics.update(self._perf(batch, version, dropped, t_enter))
        if published_s:
            Synced(published_s, handle.bytes, engine.sync_method).add_to(batch.metrics)
        self._watch_speculation(batch, step)
        if not self.placed:  # once every pool has loaded its model: where each actor's weights are
            self._log_placement(step)
        self._flush_events(step)
        return batch

    def _log_placement(self, step: int) -> None:
        """One `placement` event per worker: its node, the GPUs Ray assigned it, the device it resolved
        from them (rlvr.deploy.ray.devices.pool_device) and where its weights are. (The trainer
        ranks': by the driver, as each pool starts.)"""
        self.placed = True
        for m in MODULES:
            for j, info in enumerate(ray.get([w.placement.remote() for w in self.workers[m]])):
                self.log.event(step=step, kind="placement", module=m, replica=j, **info)

    def _collect(self, sampler, step: int, handle: WeightHandle) -> StepBatch:
        self.collecting.step = step
        engine = RemoteEngine(self, handle, step)
        batch = collect_batch(
            engine,
            sampler,
            self.reward,
            self.params,
            self.algo,
            batch_size=self.batch_size,
            ref=self.ref,
            credit=self.credit,
            teacher=self.teacher,
        )
        if engine.loads:  # the slowest worker's load; a worker whose checksum check failed is a mismatch
            Synced(
                max(w.load_s for w in engine.loads), 0, engine.sync_method, sum(not w.checksum_ok for w in engine.loads)
            ).add_to(batch.metrics)
        if self.deploy.partial_rollouts:
            batch.metrics["rollout/weights_taken_midway"] = float(sum(w.during_sampling for w in engine.loads))
        return batch

    def logprobs_on_pool(self, call, completions) -> torch.Tensor:
        """(N, T) log-probs of `completions`, sharded over the inference pool: call(worker, shard) -> ref."""
        workers = self.workers["inference"]
        parts = shards(len(completions), len(workers))
        calls = [lambda j=j, a=a, b=b: call(workers[j], completions[a:b]) for j, (a, b) in enumerate(parts)]
        refs = [c() for c in calls]
        self.inject_kill("inference", getattr(self.collecting, "step", None))
        outs = [self.get("inference", j, refs[j], calls[j]).logp for j in range(len(parts))]
        out = torch.zeros(len(completions), max(o.shape[1] for o in outs))  # (N, T)
        for (a, b), o in zip(parts, outs):
            out[a:b, : o.shape[1]] = o
        return out

    def _drop_ahead(self) -> None:
        if not self.ahead:
            return
        for future in self.ahead.values():
            future.cancel()
        for future in self.ahead.values():
            if not future.cancelled():
                future.exception()  # wait for it; its batch is discarded
        self._event("ahead_dropped", steps=sorted(self.ahead), reason="the trainer was rolled back")
        self.ahead.clear()

    # -- calls that survive a worker's death

    def get(self, module: str, j: int, ref, reissue, timeout: float | None = None, fallback=None) -> Reply:
        """The reply of call `ref` to replica j; re-issued while Ray restarts a dead worker.
        fallback(reason): the reply to use when the call cannot be answered (None: raise)."""
        tries = self.deploy.worker_restarts + 1
        for attempt in range(tries):
            try:
                out = ray.get(ref, timeout=timeout)
            except RayActorError as exc:
                self._event(
                    "worker_failed",
                    module=module,
                    replica=j,
                    error=f"{type(exc).__name__}",
                    reissued=attempt + 1 < tries,
                )
                if attempt + 1 < tries:
                    self._wait_alive(module, j)
                    ref = reissue()
                continue
            except GetTimeoutError:
                if fallback is None:
                    raise
                # the worker is stuck on this call; a restart frees it for the next one
                ray.kill(self.workers[module][j], no_restart=False)
                self._event("worker_timeout", module=module, replica=j, timeout_s=timeout)
                return fallback(f"{module} call timed out after {timeout}s")
            self._note_pid(module, j, out.pid)
            with self.lock:
                self.busy[module] += out.busy_s
            return out
        if fallback is not None:
            return fallback(f"{module} worker died {tries} times")
        raise RuntimeError(
            f"{module} replica {j} died {tries} times in one call (deploy.worker_restarts="
            f"{self.deploy.worker_restarts}); see events.jsonl"
        )

    def _wait_alive(self, module: str, j: int, timeout_s: float = 120.0) -> None:
        """Until Ray has restarted replica j (calls to an actor being restarted fail at once)."""
        deadline = time.time() + timeout_s
        while True:
            try:
                ray.get(self.workers[module][j].pid.remote(), timeout=max(1.0, deadline - time.time()))
                return
            except (RayActorError, GetTimeoutError):
                if time.time() > deadline:
                    return  # the re-issued call reports the failure
                time.sleep(0.5)

    def _note_pid(self, module: str, j: int, pid: int) -> None:
        old = self.pids[module][j]
        if old != pid:
            self.pids[module][j] = pid
            self._event("worker_restarted", module=module, replica=j, old_pid=old, new_pid=pid)

    def _check_speculation(self) -> None:
        """The speculative method's fidelity check in every rollout worker (rlvr.rollout.speculative),
        before the run trains on its samples; a worker's refusal stops the run as a config error."""
        import dataclasses

        from ray.exceptions import RayTaskError

        spec = self.rollout.speculative
        problems = self.held_out()[: spec.check_prompts]
        params = dataclasses.replace(self.params, group_size=2)
        workers = self.workers["rollout"]
        try:
            replies = ray.get([w.check_speculation.remote(self.start, problems, params) for w in workers])
        except RayTaskError as exc:
            raise exc.as_instanceof_cause() from None  # the worker's ConfigError, as it was raised
        for j, reply in enumerate(replies):
            self._event("speculative_checked", method=spec.method, replica=j, **reply.stats)

    def _watch_speculation(self, batch: StepBatch, step: int) -> None:
        """Acceptance metrics; plain decoding in every rollout worker from the next call on once the
        acceptance stays below rollout.speculative.min_accept for `patience` steps."""
        with self.lock:
            stats, self.spec_stats = self.spec_stats, None
        if not stats or not self.speculate:
            return
        spec = self.rollout.speculative
        batch.metrics.update(
            {"rollout/spec_accept_rate": stats["accept_rate"], "rollout/spec_accept_len": stats["accept_len"]}
        )
        self.low_accept_steps = self.low_accept_steps + 1 if stats["accept_rate"] < spec.min_accept else 0
        if self.low_accept_steps >= spec.patience:
            self.speculate = False
            self._event(
                "speculative_fallback",
                accept_rate=stats["accept_rate"],
                min_accept=spec.min_accept,
                steps=self.low_accept_steps,
            )

    def inject_kill(self, module: str, step: int | None) -> None:
        """Fault injection (deploy.kill_<module>_at_step): SIGKILL replica 0 of `module` right after a
        call was submitted to it, so the call in flight is lost with the process; once per run."""
        if getattr(self.deploy, f"kill_{module}_at_step") == step and self.attempt == 0 and module not in self.killed:
            self.killed.add(module)
            self._event("fault_injected", module=module, replica=0, pid=self.pids[module][0])
            os.kill(self.pids[module][0], signal.SIGKILL)

    def _event(self, kind: str, **data) -> None:
        with self.lock:
            self.events.append({"kind": kind, **data})

    def _flush_events(self, step: int) -> None:
        with self.lock:
            events, self.events = self.events, []
        for event in events:
            self.log.event(step=step, **event)

    # -- per-step figures: staleness, and each module's busy and idle time

    def _perf(self, batch: StepBatch, version: int, dropped: int, t_enter: float) -> dict[str, float]:
        now = time.time()
        lag = [version - c.policy_version for c in batch.completions] or [0]
        interval = now - (self.last_return or t_enter)  # one step of the pipeline
        self.last_return = now
        wait = now - t_enter
        out = {
            "perf/staleness_mean": sum(lag) / len(lag),
            "perf/staleness_max": float(max(lag)),
            "rollout/stale_groups_dropped": float(dropped),
            "perf/policy_version": float(version),
            "perf/trainer_busy_s": max(0.0, interval - wait),
            "perf/trainer_idle_s": wait,
        }
        if self.deploy.partial_rollouts:  # per sampled token: the version that sampled it
            lags = [
                version - v
                for c in batch.completions
                for v, m in zip(c.token_versions or [c.policy_version] * len(c.token_ids), c.mask)
                if m
            ] or [0]
            out["perf/token_staleness_mean"] = sum(lags) / len(lags)
            out["rollout/partial_frac"] = sum(c.token_versions is not None for c in batch.completions) / max(
                1, len(batch.completions)
            )
        with self.lock:
            busy, self.busy = self.busy, defaultdict(float)
        for m in MODULES:
            if self.workers[m]:
                per_replica = busy[m] / len(self.workers[m])
                out[f"perf/{m}_busy_s"] = per_replica
                out[f"perf/{m}_idle_s"] = max(0.0, interval - per_replica)
        return out
