"""Section deploy: the embedded run or the modules as Ray pools (rlvr.deploy.ray)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rlvr.configlib import require


DEPLOY_MODULES = ("rollout", "reward", "inference", "trainer")


@dataclass
class PoolConfig:
    """Resources of one module's Ray pool (rlvr.deploy.ray.pools); each replica is one actor."""

    cpus: float = 1.0
    """CPUs per replica (also its torch threads, unless train.threads is set)."""
    gpus: float = 0.0
    """GPUs per replica (fractions share a GPU)."""
    replicas: int = 1
    """Actors in the pool (rollout: policy copies sampling shards of a batch; reward: CPU scorers)."""
    colocate_with: str | None = None
    """Another module's pool to share placement-group bundles with (e.g. inference with trainer);
    None = a placement group of its own."""
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """Ray placement strategy of the pool's bundles (SPREAD puts replicas on different nodes)."""
    runtime_env: dict[str, Any] | None = None
    """Ray runtime_env of the pool's actors (env_vars, pip, py_executable, ...), as Ray takes it."""

    def __post_init__(self) -> None:
        require(self.cpus >= 0 and self.gpus >= 0, "cpus", "cpus and gpus must be >= 0")
        require(self.replicas >= 1, "replicas", f"must be >= 1, got {self.replicas}")


def _default_pools() -> dict[str, PoolConfig]:
    return {name: PoolConfig() for name in DEPLOY_MODULES}


@dataclass
class DeployConfig:
    KEY_ALIASES = {"async": "async_"}  # `async` is a Python keyword: the key deploy.async sets field async_

    backend: Literal["embedded", "ray"] = "embedded"
    """'embedded': one process, modules in sequence. 'ray': each module a Ray actor pool (pip install 'rlvr[ray]')."""
    address: str | None = None
    """Ray cluster to join: None starts a local Ray instance; 'auto' or 'ray://host:10001' joins one."""
    num_cpus: int | None = None
    """Logical CPUs of a local Ray instance; None = enough for deploy.pools (may exceed the cores)."""
    pools: dict[str, PoolConfig] = field(default_factory=_default_pools)
    """Per module (rollout, reward, inference, trainer): cpus, gpus, replicas, colocate_with, strategy.
    Modules left out keep the defaults (1 CPU, 1 replica, own pool)."""
    async_: bool = False
    """(key: deploy.async) Sample batch t+1 while the trainer updates on batch t."""
    max_staleness: int = 1
    """Async: batches sampled ahead, and the most policy versions a used completion may lag; older ones are dropped."""
    partial_rollouts: bool = False
    """Async: a rollout worker takes new weights as soon as they are published, between decode steps of
    the trajectories it is sampling (which go on with the new weights; every token keeps the version
    that sampled it: Completion.token_versions), instead of finishing the batch with the weights it
    started with. Needs rollout.engine=loop or hf."""
    ratio_cap: float = 3.0
    """Async: the importance ratio to the stored behaviour log-probs is capped by dual clipping at this
    value (applied when algo.dual_clip is unset); the PPO clip bounds the other side."""
    reward_timeout_s: float = 300.0
    """A reward call not answered in this time scores its samples invalid instead of stalling the step."""
    worker_restarts: int = 3
    """Restarts Ray grants each rollout/reward/inference actor (its in-flight call is re-issued)."""
    trainer_restarts: int = 1
    """Times the trainer is restarted from its last checkpoint after its process dies."""
    kill_rollout_at_step: int = 0
    """Fault injection: SIGKILL rollout replica 0 while it samples this step (0 = off)."""
    kill_trainer_at_step: int = 0
    """Fault injection: SIGKILL the trainer at the start of this step, once (0 = off)."""
    kill_reward_at_step: int = 0
    """Fault injection: SIGKILL reward replica 0 while it scores this step (0 = off)."""
    kill_inference_at_step: int = 0
    """Fault injection: SIGKILL inference replica 0 while it scores this step (0 = off)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.pools) - set(DEPLOY_MODULES))
        require(not unknown, "pools", f"unknown module(s) {unknown}; choose from {', '.join(DEPLOY_MODULES)}")
        self.pools = {**_default_pools(), **self.pools}
        for name, pool in self.pools.items():
            target = pool.colocate_with
            require(
                target is None
                or (target in DEPLOY_MODULES and target != name and self.pools[target].colocate_with is None),
                f"pools.{name}.colocate_with",
                f"must name another module with a pool of its own, got {target!r}",
            )
        require(self.max_staleness >= 0, "max_staleness", f"must be >= 0, got {self.max_staleness}")
        require(self.ratio_cap > 1, "ratio_cap", f"must be > 1 (dual-clip constant), got {self.ratio_cap}")
        require(self.reward_timeout_s > 0, "reward_timeout_s", f"must be > 0, got {self.reward_timeout_s}")
