"""deploy.pools -> Ray placement groups, and the options that put each actor in its bundle.

A pool of its own is one placement group with one bundle per replica ({CPU: cpus, GPU: gpus}).
A pool colocated with another adds its resources to that pool's bundles (replica j of both
shares bundle j), so e.g. the reference worker can sit on the trainer's GPU.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlvr.config import DeployConfig, PoolConfig


def _resources(pool: PoolConfig) -> dict[str, float]:
    return {k: v for k, v in (("CPU", pool.cpus), ("GPU", pool.gpus)) if v > 0}


def pool_bundles(pools: dict[str, PoolConfig]) -> dict[str, list[dict[str, float]]]:
    """Bundles of each pool that has a placement group of its own (colocated pools folded in)."""
    bundles: dict[str, list[dict[str, float]]] = {}
    for name, pool in pools.items():
        if pool.colocate_with is None:
            bundles[name] = [_resources(pool) for _ in range(pool.replicas)]
    for pool in pools.values():
        if pool.colocate_with is not None:
            own = bundles[pool.colocate_with]
            for j in range(pool.replicas):
                if j == len(own):
                    own.append({})
                for k, v in _resources(pool).items():
                    own[j][k] = own[j].get(k, 0.0) + v
    return bundles


def required(pools: dict[str, PoolConfig]) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for bundles in pool_bundles(pools).values():
        for b in bundles:
            for k, v in b.items():
                total[k] += v
    return dict(total)


class Placement:
    """The placement groups of a run; `options(module, j)` schedules replica j of a module."""

    def __init__(self, deploy: DeployConfig, modules: list[str], timeout_s: float = 120.0) -> None:
        self.pools = {m: deploy.pools[m] for m in modules}
        for m, pool in self.pools.items():  # a pool colocated with an unused module gets its own group
            if pool.colocate_with is not None and pool.colocate_with not in self.pools:
                self.pools[m] = dataclasses.replace(pool, colocate_with=None)
        self.groups = {
            name: placement_group(bundles, strategy=self.pools[name].strategy, name=f"rlvr-{name}")
            for name, bundles in pool_bundles(self.pools).items()
        }
        try:
            ray.get([pg.ready() for pg in self.groups.values()], timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise RuntimeError(
                f"deploy.pools: the placement groups need {required(self.pools)} but the Ray cluster offers "
                f"{ray.available_resources()} after {timeout_s:.0f}s; lower cpus/gpus/replicas in deploy.pools "
                f"or add nodes (a local instance takes deploy.num_cpus)"
            ) from None

    def options(self, module: str, replica: int) -> dict:
        pool = self.pools[module]
        group = self.groups[pool.colocate_with or module]
        out = {
            "num_cpus": pool.cpus,
            "num_gpus": pool.gpus,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=replica),
        }
        if pool.runtime_env:
            out["runtime_env"] = dict(pool.runtime_env)
        return out

    def close(self) -> None:
        for pg in self.groups.values():
            remove_placement_group(pg)
        self.groups = {}
