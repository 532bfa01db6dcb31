"""The Ray driver's mechanics, run by rlvr.assembly.on_ray.train_on_ray (`rlvr train deploy.backend=ray`):

    ray.init (local, or deploy.address) -> placement groups (deploy.pools)
      rollout  x N  RolloutWorker    policy copies, sample shards of each batch; the environments
      reward   x R  RewardWorker     rule rewards / sandbox on CPU cores; the environments' tool calls
      inference x 1 InferenceWorker  reference log-probs (algo.beta > 0), learned rewards (reward.models/judges),
                                   the distillation teacher's log-probs (algo.distill.teacher)
      trainer  x 1  TrainerActor     the embedded GRPO loop, batches collected on the actors above
               (x N with train.strategy=fsdp: one process group, the policy sharded across it)

The trainer runs `rlvr.assembly.train` itself (same update, log, checkpoints, eval), so the
run directory is the embedded one. The driver runs (or finds cached) the cold start and ships it,
with the learned components' and the teacher's directories, through the object store
(`ship_run_files`): no node needs a path of the driver's. When a trainer's process dies, a
new trainer pool resumes from the last checkpoint (ckpt.resume=auto), up to
deploy.trainer_restarts times (`train_pool` runs one); with run.dir at a URL, from the last one
committed there.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from rlvr.config import AlgoConfig, ConfigError, DeployConfig, DistillConfig, ModelConfig, RewardConfig
from rlvr.deploy.ray.parts import ActorParts
from rlvr.inference.reference import check_teacher_tokenizer, teacher_path
from rlvr.models.loading import load_tokenizer
from rlvr.storage import RunStore

_MISSING = "deploy.backend=ray needs Ray: pip install 'rlvr[ray]' (or pip install 'ray>=2.30')"


def import_ray():
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


def ship_run_files(start_path: Path, r: RewardConfig, distill: DistillConfig, model: ModelConfig):
    """Put every directory of the driver's that a pool or a trainer rank loads in the object store:
    the start of RL, the learned components' (reward models, judges on a local model), the
    distillation teacher's, whose tokenizer is checked against the policy's here (a ConfigError
    naming the key before any actor starts). model: where a teacher's name resolves (its cache)."""
    from rlvr.deploy.ray.shipping import RunFiles, ship

    learned = {name: ship(m.path) for name, m in r.models.items()}
    learned.update(
        {name: ship(j.model) for name, j in r.judges.items() if j.base_url is None and Path(j.model).is_dir()}
    )
    teacher = None
    if distill.teacher:
        path = teacher_path(distill.teacher, model)
        check_teacher_tokenizer(distill.teacher, load_tokenizer(path), load_tokenizer(start_path))
        teacher = ship(path)
    return RunFiles(ship(start_path), learned, teacher)


def train_pool(ray, trainers: list, parts: ActorParts, files, workers: dict, pending: list[dict], attempt: int) -> dict:
    """Run the trainer pool to the end; rank 0's summary. One trainer: the embedded loop on Ray. N
    (train.strategy=fsdp): one process group, rank 0 listening on its node; the first rank to fail
    fails the pool (the others would wait on it in a collective)."""
    world = len(trainers)
    master = ray.get(trainers[0].address.remote()) if world > 1 else None
    pending = [
        *pending,
        *(
            {"kind": "placement", "module": "trainer", "replica": rank, "attempt": attempt, **info}
            for rank, info in enumerate(ray.get([t.placement.remote() for t in trainers]))
        ),
    ]
    refs = [
        t.train.remote(parts, files, workers, pending, attempt, rank, world, master) for rank, t in enumerate(trainers)
    ]
    left = list(refs)
    while left:
        done, left = ray.wait(left, num_returns=1)
        ray.get(done[0])  # raises the rank's error
    return ray.get(refs[0])


def failed_summary(store: RunStore | None, run_dir: Path, restarts: int) -> None:
    """The trainer died more often than deploy.trainer_restarts allows; say so where a user looks.
    store: run.dir at a URL (the events so far, then ours after them)."""
    if store is not None:
        store.pull(checkpoint=False)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "events.jsonl", "a") as f:
        f.write(
            json.dumps(
                {"time": time.time(), "kind": "failed", "step": None, "error": f"trainer died {restarts + 1} times"}
            )
            + "\n"
        )
    (run_dir / "summary.json").write_text(
        json.dumps({"status": "failed", "steps": None, "error": "trainer process died"}, indent=2) + "\n"
    )
    if store is not None:
        store.push()
