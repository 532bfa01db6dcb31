"""The launch recipes in examples/deploy/ (KubeRay RayJob, Slurm sbatch): each is parsed, its `rlvr
train` command's config is loaded as rlvr would load it, and the machines it asks for hold every
pool's bundles (a first-fit packing of Ray's placement-group bundles onto its nodes)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import yaml

from rlvr.config import load_config
from rlvr.deploy.ray.driver import modules
from rlvr.deploy.ray.pools import pool_bundles
from rlvr.urls import is_url

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "examples" / "deploy"


def train_config(command: str, extra: list[str] = ()):
    words = shlex.split(command)
    assert words[:2] == ["rlvr", "train"] and words[2] == "--config", command
    return load_config(ROOT / words[3], [*words[4:], *extra])


def packs(cfg, nodes: list[dict[str, float]]) -> bool:
    """Whether every bundle of the run's pools fits on the nodes (largest first, first fit)."""
    used = modules(cfg.algo, cfg.reward)
    bundles = [b for pool in pool_bundles({m: cfg.deploy.pools[m] for m in used}).values() for b in pool]
    free = [dict(n) for n in nodes]
    for b in sorted(bundles, key=lambda b: (-b.get("GPU", 0), -b.get("CPU", 0))):
        node = next((n for n in free if all(n.get(k, 0) >= v for k, v in b.items())), None)
        if node is None:
            return False
        for k, v in b.items():
            node[k] -= v
    return True


def quantity(value) -> float:
    return float(str(value).rstrip("m")) / (1000 if str(value).endswith("m") else 1)


def test_the_kuberay_rayjob_runs_a_config_its_cluster_can_place():
    job = yaml.safe_load((RECIPES / "kuberay-rayjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    cfg = train_config(job["spec"]["entrypoint"])
    assert cfg.deploy.backend == "ray" and cfg.deploy.address == "auto"
    spec = job["spec"]["rayClusterSpec"]

    def node(group) -> dict[str, float]:
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        cpus = quantity(group["rayStartParams"].get("num-cpus", limits["cpu"]))
        return {"CPU": cpus, "GPU": quantity(limits.get("nvidia.com/gpu", 0))}

    nodes = [node(spec["headGroupSpec"])] + [node(g) for g in spec["workerGroupSpecs"] for _ in range(g["replicas"])]
    assert packs(cfg, nodes)
    assert not packs(cfg, nodes[:2])  # one GPU node fewer does not hold the pools: the check can fail
    # no filesystem shared between pods: the model and the run directory in object storage
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    assert (
        is_url(cfg.run.dir) and is_url(cfg.model.name) and not any("volumes" in g["template"]["spec"] for g in groups)
    )


def test_the_slurm_script_is_valid_bash_and_asks_for_nodes_that_hold_the_pools():
    script = (RECIPES / "slurm.sbatch").read_text()
    subprocess.run(["bash", "-n", str(RECIPES / "slurm.sbatch")], check=True)
    opts = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", script, re.M))
    (command,) = [line for line in script.splitlines() if line.startswith("rlvr train")]
    cfg = train_config(command.replace('"$@"', ""), ["model.name=/models/my-model"])
    nodes = [{"CPU": float(opts["cpus-per-task"]), "GPU": float(opts["gpus-per-node"])}] * int(opts["nodes"])
    assert packs(cfg, nodes)
    assert f"--num-gpus={opts['gpus-per-node']}" in script  # Ray is told the GPUs Slurm gave each node
