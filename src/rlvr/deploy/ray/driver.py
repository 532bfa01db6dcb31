"""`rlvr train deploy.backend=ray`: place the module pools, start the actors, run the trainer.

    ray.init (local, or deploy.address) -> placement groups (deploy.pools)
      rollout  x N  RolloutWorker    policy copies, sample shards of each batch; the environments
      reward   x R  RewardWorker     rule rewards / sandbox on CPU cores; the environments' tool calls
      inference x 1 InferenceWorker  reference log-probs (algo.beta > 0), learned rewards (reward.models/judges),
                                   the distillation teacher's log-probs (algo.distill.teacher)
      trainer  x 1  TrainerActor     the embedded GRPO loop, batches collected on the actors above
               (x N with train.strategy=fsdp: one process group, the policy sharded across it)

The trainer runs `rlvr.assembly.train` itself (same update, log, checkpoints, eval), so the
run directory is the embedded one. The driver runs (or finds cached) the cold start and ships it,
with the learned components' and the teacher's directories, through the object store: no node
needs a path of the driver's. When a trainer's process dies, a
new trainer pool resumes from the last checkpoint (ckpt.resume=auto), up to
deploy.trainer_restarts times; with run.dir at a URL, from the last one committed there.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path

from rlvr.assembly import auto_temperature, run_store, starting_point
from rlvr.config import AlgoConfig, Config, ConfigError, DeployConfig, DistillConfig, ModelConfig, RewardConfig
from rlvr.console import RunConsole
from rlvr.envs.settings import check_env
from rlvr.inference.reference import check_teacher_tokenizer, teacher_path
from rlvr.models.loading import load_tokenizer
from rlvr.storage import RunStore

_MISSING = "deploy.backend=ray needs Ray: pip install 'rlvr[ray]' (or pip install 'ray>=2.30')"


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError(_MISSING) from None
    return ray


def with_ratio_cap(algo: AlgoConfig, deploy: DeployConfig) -> AlgoConfig:
    """What the Ray backend implies for section algo: async mode caps the importance ratio by dual
    clipping (deploy.ratio_cap) where algo.dual_clip is unset."""
    if deploy.async_ and algo.dual_clip is None:
        return dataclasses.replace(algo, dual_clip=deploy.ratio_cap)
    return algo


def modules(algo: AlgoConfig, reward: RewardConfig) -> list[str]:
    """The pools a run uses: inference only for a reference, learned rewards or a teacher."""
    inference = algo.beta > 0 or reward.models or reward.judges or algo.distill.teacher
    return ["rollout", "reward", "trainer"] + (["inference"] if inference else [])


def run(cfg: Config) -> dict:
    check_env(cfg.env, cfg.task, cfg.algo, cfg.reward, cfg.sources)
    ray = _import_ray()
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
            import os
            local["num_cpus"] = d.num_cpus or max(os.cpu_count() or 1,
                                                  int(required({m: d.pools[m] for m in used}).get("CPU", 1) + 0.999))
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
                workers[m] = [remote.options(**placement.options(m, j)).remote(cfg, threads(m), *extra)
                              for j in range(d.pools[m].replicas)]
        pending: list[dict] = [{"kind": "temperature_picked", **picked}] if picked else []
        run_cfg = cfg
        for attempt in range(d.trainer_restarts + 1):
            trainers = [actors.actor_class(actors.TrainerActor, 0).options(
                **placement.options("trainer", j)).remote(threads("trainer")) for j in range(d.pools["trainer"].replicas)]
            try:
                return _train_pool(ray, trainers, run_cfg, files, workers, pending, attempt)
            except RayActorError as exc:  # a trainer's process died (a Python error arrives as RayTaskError)
                pending = [{"kind": "trainer_restarted", "attempt": attempt + 1, "error": type(exc).__name__,
                            "resume": "auto"}]
                run_cfg = dataclasses.replace(run_cfg, ckpt=dataclasses.replace(run_cfg.ckpt, resume="auto"))
            finally:
                for t in trainers:  # the whole pool goes: a group that lost a rank cannot go on
                    ray.kill(t, no_restart=True)
        _failed_summary(run_store(cfg), cfg.run_dir, d.trainer_restarts)
        return {"status": "failed", "steps": None}
    finally:
        for handles in workers.values():
            for h in handles:
                ray.kill(h, no_restart=True)
        placement.close()
        if own_cluster:
            ray.shutdown()


def ship_run_files(start_path: Path, r: RewardConfig, distill: DistillConfig, model: ModelConfig):
    """Put every directory of the driver's that a pool or a trainer rank loads in the object store:
    the start of RL, the learned components' (reward models, judges on a local model), the
    distillation teacher's, whose tokenizer is checked against the policy's here (a ConfigError
    naming the key before any actor starts). model: where a teacher's name resolves (its cache)."""
    from rlvr.deploy.ray.shipping import RunFiles, ship

    learned = {name: ship(m.path) for name, m in r.models.items()}
    learned.update({name: ship(j.model) for name, j in r.judges.items() if j.base_url is None and Path(j.model).is_dir()})
    teacher = None
    if distill.teacher:
        path = teacher_path(distill.teacher, model)
        check_teacher_tokenizer(distill.teacher, load_tokenizer(path), load_tokenizer(start_path))
        teacher = ship(path)
    return RunFiles(ship(start_path), learned, teacher)


def _train_pool(ray, trainers: list, cfg: Config, files, workers: dict, pending: list[dict], attempt: int) -> dict:
    """Run the trainer pool to the end; rank 0's summary. One trainer: the embedded loop on Ray. N
    (train.strategy=fsdp): one process group, rank 0 listening on its node; the first rank to fail
    fails the pool (the others would wait on it in a collective)."""
    world = len(trainers)
    master = ray.get(trainers[0].address.remote()) if world > 1 else None
    pending = [*pending, *({"kind": "placement", "module": "trainer", "replica": rank, "attempt": attempt, **info}
                           for rank, info in enumerate(ray.get([t.placement.remote() for t in trainers])))]
    refs = [t.train.remote(cfg, files, workers, pending, attempt, rank, world, master) for rank, t in enumerate(trainers)]
    left = list(refs)
    while left:
        done, left = ray.wait(left, num_returns=1)
        ray.get(done[0])  # raises the rank's error
    return ray.get(refs[0])


def _failed_summary(store: RunStore | None, run_dir: Path, restarts: int) -> None:
    """The trainer died more often than deploy.trainer_restarts allows; say so where a user looks.
    store: run.dir at a URL (the events so far, then ours after them)."""
    if store is not None:
        store.pull(checkpoint=False)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "events.jsonl", "a") as f:
        f.write(json.dumps({"time": time.time(), "kind": "failed", "step": None,
                            "error": f"trainer died {restarts + 1} times"}) + "\n")
    (run_dir / "summary.json").write_text(json.dumps({"status": "failed", "steps": None,
                                                      "error": "trainer process died"}, indent=2) + "\n")
    if store is not None:
        store.push()
