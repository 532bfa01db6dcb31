"""Where a Ray actor's model goes: the GPU its pool got from Ray, else the CPU."""

from __future__ import annotations

import os

import ray
import torch

LOGICAL_GPUS = "RLVR_LOGICAL_GPUS"
"""Set to 1 where Ray's GPUs are logical (`num_gpus` declared on a CPU node, in tests): an actor
resolves its device as on a GPU node, and places its model on the CPU, saying so."""


def pool_device() -> tuple[torch.device, torch.device]:
    """(resolved, placed) device of this actor's model: the GPU Ray assigned it from its pool's
    `gpus` (Ray shows an actor only its own GPUs, numbered from 0), else the CPU. `placed` differs
    from `resolved` only under RLVR_LOGICAL_GPUS=1. A GPU assigned on a node whose torch sees
    none is an error: the pool's GPUs would sit idle."""
    if not ray.get_gpu_ids():
        return torch.device("cpu"), torch.device("cpu")
    resolved = torch.device("cuda", 0)
    if torch.cuda.is_available():
        return resolved, resolved
    if os.environ.get(LOGICAL_GPUS) == "1":
        return resolved, torch.device("cpu")
    raise RuntimeError(
        f"Ray assigned this actor GPU(s) {ray.get_gpu_ids()} but torch {torch.__version__} on "
        f"{ray.util.get_node_ip_address()} sees no CUDA device: install a CUDA build of torch on the "
        "GPU nodes, or set the pool's gpus to 0 in deploy.pools"
    )


class Placed:
    """What every actor reports of where it runs (`placement()`): its node, the GPUs Ray assigned it,
    the device it resolved from them, and where its model's weights are."""

    weights_device: str | None = None
    """Where the actor's model weights are, once loaded (None: no model, or not loaded yet)."""

    def placement(self) -> dict:
        resolved, placed = pool_device()
        return {
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "device": str(resolved),
            "placed": str(placed),
            "weights": self.weights_device,
        }
