"""A run on Ray, from its config (`rlvr train deploy.backend=ray`): the pools placed, the actors started
with the parts they build (`RunParts`, the rlvr.deploy.ray.parts.ActorParts of this config), the
trainer pool run and restarted (rlvr.deploy.ray.driver's mechanics).

    summary = train_on_ray(cfg)
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from rlvr.assembly.embedded import train
from rlvr.assembly.parts import (
    component_weights,
    episode_spec,
    policy,
    reference_model,
    rollout_engine,
    rule_reward,
    run_store,
    run_task,
    teacher_model,
)
from rlvr.assembly.start import auto_temperature, starting_point
from rlvr.config import Config
from rlvr.console import RunConsole
from rlvr.deploy.ray.driver import failed_summary, import_ray, modules, ship_run_files, train_pool, with_ratio_cap
from rlvr.envs.settings import check_env
from rlvr.tools import resolve_tools


@dataclasses.dataclass(frozen=True)
class RunParts:
    """What each Ray actor builds, from the run's config (the driver's, shipped with the actor)."""

    cfg: Config

    @property
    def engine_name(self) -> str:
        return self.cfg.rollout.engine

    @property
    def dtype(self) -> str:
        return self.cfg.model.dtype

    @property
    def speculative(self):
        return self.cfg.rollout.speculative

    @property
    def partial_rollouts(self) -> bool:
        return self.cfg.deploy.partial_rollouts

    @property
    def reward(self):
        return self.cfg.reward

    def policy(self, path, device):
        return policy(self.cfg, path, device)

    def episodes(self, tool_host):
        return episode_spec(self.cfg, tool_host)

    def rollout_engine(self, model, tokenizer, model_dir, episodes):
        return rollout_engine(self.cfg, model, tokenizer, model_dir=model_dir, episodes=episodes)

    def rule_reward(self):
        return rule_reward(self.cfg)

    def tools(self) -> dict:
        return resolve_tools(self.cfg.env.tools, self.cfg.reward.code)

    def reference(self, model, tokenizer):
        return reference_model(self.cfg, model, tokenizer)

    def teacher(self, tokenizer, device, path: str):
        return teacher_model(self.cfg, tokenizer, device, path=path)

    def train(self, make_source: Callable, start: Path, device) -> dict:
        cfg = self.cfg
        if cfg.train.device == "auto" and device.type == "cuda":  # the pool's GPU ('auto': the CPU otherwise)
            cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, device="cuda"))
        return train(cfg, make_source=make_source, start=start)

    def batch_source(self, workers: dict[str, list], pending_events: Sequence[dict], attempt: int, files):
        from rlvr.deploy.ray.source import RayBatchSource  # (ray, imported where an actor runs)

        c = self.cfg
        return RayBatchSource(
            workers,
            list(pending_events),
            attempt,
            files,
            deploy=c.deploy,
            rollout=c.rollout,
            algo=c.algo,
            learned={**c.reward.models, **c.reward.judges},
            weights=component_weights(c),
            credit=c.env.credit,
            steps=c.train.steps,
            seed=c.seed,
            held_out=lambda: run_task(c).held_out(),
        )


def train_on_ray(cfg: Config) -> dict:
    """Run GRPO as configured on Ray; the summary (rank 0 of the trainer pool's)."""
    check_env(cfg.env, cfg.task, cfg.algo, cfg.reward, cfg.sources)
    ray = import_ray()  # Ray is optional (rlvr[ray]): these modules import it at their top
    from ray.exceptions import RayActorError

    from rlvr.deploy.ray import actors
    from rlvr.deploy.ray.pools import Placement, required

    console = RunConsole(cfg.run.progress)
    cfg = dataclasses.replace(cfg, algo=with_ratio_cap(cfg.algo, cfg.deploy))
    cfg, picked = auto_temperature(cfg, console, functools.partial(starting_point, cfg, console))
    d = cfg.deploy
    used = modules(cfg.algo, cfg.reward)
    own_cluster = not ray.is_initialized()
    if own_cluster:
        local = {}
        if d.address is None:  # logical CPUs may exceed the cores: a pool's CPUs are a reservation, not a core
            local["num_cpus"] = d.num_cpus or max(
                os.cpu_count() or 1, int(required({m: d.pools[m] for m in used}).get("CPU", 1) + 0.999)
            )
        ray.init(address=d.address, include_dashboard=False, logging_level="WARNING", **local)
    start = starting_point(cfg, console)  # the cold start is cached by now
    files = ship_run_files(start, cfg.reward, cfg.algo.distill, cfg.model)
    placement = Placement(d, used)
    # the reward workers first: the rollout workers' tool calls run on them
    classes = {"reward": actors.RewardWorker, "rollout": actors.RolloutWorker, "inference": actors.InferenceWorker}
    workers: dict[str, list] = {m: [] for m in classes}

    def threads(m: str) -> int:
        return cfg.train.threads or max(1, int(d.pools[m].cpus))

    try:
        for m, cls in classes.items():
            if m in used:
                remote = actors.actor_class(cls, d.worker_restarts, d.partial_rollouts)
                extra = (workers["reward"],) if m == "rollout" and cfg.env.tools else ()
                workers[m] = [
                    remote.options(**placement.options(m, j)).remote(RunParts(cfg), threads(m), *extra)
                    for j in range(d.pools[m].replicas)
                ]
        pending: list[dict] = [{"kind": "temperature_picked", **picked}] if picked else []
        run_cfg = cfg
        for attempt in range(d.trainer_restarts + 1):
            trainers = [
                actors.actor_class(actors.TrainerActor, 0)
                .options(**placement.options("trainer", j))
                .remote(threads("trainer"))
                for j in range(d.pools["trainer"].replicas)
            ]
            try:
                return train_pool(ray, trainers, RunParts(run_cfg), files, workers, pending, attempt)
            except RayActorError as exc:  # a trainer's process died (a Python error arrives as RayTaskError)
                pending = [
                    {"kind": "trainer_restarted", "attempt": attempt + 1, "error": type(exc).__name__, "resume": "auto"}
                ]
                run_cfg = dataclasses.replace(run_cfg, ckpt=dataclasses.replace(run_cfg.ckpt, resume="auto"))
            finally:
                for t in trainers:  # the whole pool goes: a group that lost a rank cannot go on
                    ray.kill(t, no_restart=True)
        failed_summary(run_store(cfg), cfg.run_dir, d.trainer_restarts)
        return {"status": "failed", "steps": None}
    finally:
        for handles in workers.values():
            for h in handles:
                ray.kill(h, no_restart=True)
        placement.close()
        if own_cluster:
            ray.shutdown()
