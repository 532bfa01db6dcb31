"""Section train: the optimiser, batches, devices and strategy of the update (rlvr.train)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlvr.configlib import require


@dataclass
class TrainConfig:
    steps: int = 60
    lr: float = 1e-4
    ppo_epochs: int = 2
    """mu: policy updates per rollout batch, using the stored old log-probs."""
    mini_batches: int = 1
    """Optimizer steps per epoch: the rollout batch is split into this many mini-batches."""
    micro_batch_size: int = 0
    """Sequences per forward/backward (gradient accumulation); 0 = the whole mini-batch."""
    micro_batch_tokens: int = 0
    """Token budget per forward/backward instead of a sequence count: sequences (prompt + completion)
    packed several to a row, rows as wide as the micro-batch's longest sequence, each sequence
    attending only to itself; a sequence longer than the budget runs alone. 0 = off (micro_batch_size)."""
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    warmup: int = 0
    """Steps of linear learning-rate warmup."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning rate after warmup: constant, or decayed to lr * min_lr_ratio at the last step."""
    min_lr_ratio: float = 0.0
    """Where a linear or cosine schedule ends, as a fraction of train.lr."""
    threads: int = 0
    """torch CPU threads; 0 = all cores (under train.strategy=fsdp: the cores shared out among the ranks)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the policy, reference, optimizer state and batches live: 'auto' is CUDA when available."""
    strategy: Literal["single", "fsdp"] = "single"
    """'single': one trainer process. 'fsdp': data parallel over train.world_size ranks with the
    policy sharded by FSDP2 (rlvr.train.parallel); `rlvr train` launches the ranks itself."""
    world_size: int = 0
    """Ranks under train.strategy=fsdp; 0 = the launcher's WORLD_SIZE (torchrun), or one per GPU."""
    offload: bool = False
    """FSDP2's CPUOffloadPolicy: sharded parameters, gradients and AdamW state live in host memory
    and move to the GPU for each layer's use (train.strategy=fsdp on CUDA)."""

    def __post_init__(self) -> None:
        require(self.world_size >= 0, "world_size", f"must be >= 0, got {self.world_size}")
        require(
            self.strategy == "fsdp" or self.world_size <= 1,
            "world_size",
            f"{self.world_size} ranks need train.strategy=fsdp (the default 'single' is one process)",
        )
        require(
            not self.offload or self.strategy == "fsdp",
            "offload",
            "offloads FSDP2's shards: it needs train.strategy=fsdp",
        )
        require(
            not (self.offload and self.device == "cpu"),
            "offload",
            "moves the training state from the GPU to host memory; with train.device=cpu it is there already",
        )
        require(self.steps >= 0, "steps", f"must be >= 0, got {self.steps}")
        require(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        require(self.ppo_epochs >= 1, "ppo_epochs", f"must be >= 1, got {self.ppo_epochs}")
        require(self.mini_batches >= 1, "mini_batches", f"must be >= 1, got {self.mini_batches}")
        require(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
