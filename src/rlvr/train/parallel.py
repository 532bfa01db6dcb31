"""Data parallelism across processes: one trainer per rank, the policy sharded with FSDP2.

    par = Parallel.create(cfg.train)         # this process alone, or its rank of an FSDP group
    model = par.shard(model)                 # fully_shard each decoder layer, then the whole model
    mine = par.share(items)                  # this rank's share of a list (contiguous, rank order)
    every = par.gather(mine)                 # all ranks' shares concatenated, on every rank
    for name, full in par.full_weights(model): ...   # one gathered tensor at a time

`train.strategy=fsdp` (`torch.distributed.fsdp.fully_shard`, the FSDP2 API): each
rank holds 1/world of every weight, gradient and AdamW moment. The forward of a
layer all-gathers its weights and drops them again after use; the backward
reduce-scatters the gradients, summed (not averaged: each rank's loss is already
weighted by its share of the global token count, `rlvr.train.update`), so one
optimizer step over a batch split across ranks is the step over the whole batch.

Rollouts are split too: each rank samples and scores its share of the prompts
with a full, unsharded copy of the weights (its rollout engine), and the scored
groups are gathered so that every rank sees the whole batch (advantages,
metrics, the sample log), in the same order a single process would.

Ranks come from the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT: torchrun, `rlvr train` itself via `launch`, or a Ray trainer pool);
gloo on CPU, NCCL on CUDA. Rank 0 is the main rank: it writes the run
directory, evaluates and exports; the others log to <run dir>/ranks/rank_N/.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch

from rlvr.configlib import ConfigError

T = TypeVar("T")

_TIMEOUT = timedelta(hours=2)
"""A rank waits this long for the others (rank 0 may run the cold-start SFT or an evaluation meanwhile)."""


def train_device(name: str) -> torch.device:
    """train.device: 'auto' is CUDA when a device is visible, else the CPU; 'cuda' without one is a
    config error (before anything is loaded)."""
    if name == "cuda" and not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        raise ConfigError(f"train.device=cuda: {why} (torch {torch.__version__}); use train.device=cpu or auto")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def _die_with_parent() -> None:
    """SIGKILL this process when its parent (the launcher) dies, even by SIGKILL, which the launcher
    cannot forward: a rank never outlives its run and goes on writing into the run directory."""
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the launcher died before the line above
        os._exit(1)


class Parallel:
    """This process's place in the trainer group; world 1 is a single process and every method is trivial."""

    def __init__(self, rank: int = 0, world: int = 1, device: torch.device | None = None) -> None:
        self.rank, self.world = rank, world
        self.device = device or torch.device("cpu")

    @classmethod
    def create(cls, train, device: torch.device | None = None) -> "Parallel":
        """From a `TrainConfig`: strategy single is world 1; fsdp joins (or starts) the process group
        the launcher's environment describes."""
        if train.strategy != "fsdp":
            return cls(device=device)
        import torch.distributed as dist

        if "RANK" not in os.environ:
            raise ConfigError(
                "train.strategy=fsdp: no RANK/WORLD_SIZE in the environment; start with `rlvr train` "
                "(it launches train.world_size ranks) or torchrun"
            )
        world = int(os.environ["WORLD_SIZE"])
        if train.world_size and train.world_size != world:
            raise ConfigError(
                f"train.world_size={train.world_size} but the launcher started {world} ranks "
                f"(WORLD_SIZE); set them equal or leave train.world_size=0"
            )
        device = device or torch.device("cpu")
        if device.type == "cuda":
            local = int(os.environ.get("LOCAL_RANK", 0))
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
        if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun (or `rlvr train`) rank: die with the launcher
            _die_with_parent()
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=_TIMEOUT)
        return cls(dist.get_rank(), dist.get_world_size(), device)

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def sharded(self) -> bool:
        return self.world > 1

    # --- the model -------------------------------------------------------------------------

    def shard(self, model: torch.nn.Module, *, offload: bool = False) -> torch.nn.Module:
        """FSDP2 over the decoder layers (the model's `_no_split_modules`), then the root (embeddings,
        final norm, LM head). Weights stay fp32: bf16 is the forwards' autocast (rlvr.scoring.compute).
        offload: parameters, gradients and optimizer state live in host memory between uses."""
        if not self.sharded:
            return model
        from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, fully_shard

        kwargs = {"offload_policy": CPUOffloadPolicy(pin_memory=self.device.type == "cuda")} if offload else {}
        names = set(getattr(model, "_no_split_modules", None) or ())
        layers = [m for m in model.modules() if type(m).__name__ in names]
        if not layers:
            raise ValueError(
                f"{type(model).__name__}: no decoder layers to shard (its _no_split_modules are "
                f"{sorted(names) or 'not set'}); train.strategy=fsdp needs a transformers decoder"
            )
        for layer in layers:
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)
        for m in model.modules():  # each rank's loss is its share of the batch's: sum, do not average
            if isinstance(m, FSDPModule):
                m.set_gradient_divide_factor(1.0)
                m.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no pre-multiplied sum
        return model

    def full_weights(self, model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, full tensor) of every weight, all-gathered one tensor at a time (every rank must
        iterate, in the same order); a single process yields its own tensors."""
        for name, tensor in model.state_dict().items():
            yield name, (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor)

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Every weight gathered, on the CPU (for an export or a weight digest)."""
        return {name: t.detach().cpu() for name, t in self.full_weights(model)}

    # --- data ------------------------------------------------------------------------------

    def share(self, items: Sequence[T]) -> tuple[int, Sequence[T]]:
        """(start, this rank's contiguous share): shares differ in size by at most one, rank order."""
        n = len(items)
        start = self.rank * n // self.world
        return start, items[start : (self.rank + 1) * n // self.world]

    def gather(self, mine: list[T]) -> list[T]:
        """Every rank's list, concatenated in rank order, on every rank."""
        if not self.sharded:
            return list(mine)
        import torch.distributed as dist

        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, list(mine))
        return [x for part in parts for x in part]

    def broadcast(self, obj: T) -> T:
        """Rank 0's object on every rank."""
        if not self.sharded:
            return obj
        import torch.distributed as dist

        box = [obj if self.main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def sum(self, value: float) -> float:
        """The sum over ranks of a number (a collective: every rank calls it)."""
        if not self.sharded:
            return value
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return float(t)

    def barrier(self) -> None:
        if self.sharded:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        if self.sharded:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.barrier()  # every rank done with the group first: a rank that tore gloo down while another
                dist.destroy_process_group()  # still used it aborted ("terminate called without an active exception")
