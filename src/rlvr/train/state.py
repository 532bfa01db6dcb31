"""The trainer's state: everything a step changes, what a checkpoint saves, what a resume or rollback restores."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rlvr.checkpoint import load_weights, rng_state, set_rng_state
from rlvr.config import TrainConfig
from rlvr.evaluate import Evaluation
from rlvr.ops.guard import RunGuard, rescale_lr
from rlvr.rewards import RewardMonitor
from rlvr.tasks import ProblemSampler
from rlvr.train.lr import lr_factor
from rlvr.train.parallel import Parallel
from rlvr.train.sharded_checkpoint import is_sharded, load_full_weights, load_sharded
from rlvr.train.update import build_optimizer


def seed_everything(seed: int, rank: int = 0) -> None:
    """Seed torch, random and numpy; each rank of a trainer group samples its share of the
    prompts from a stream of its own (rank 0's is the single-process one)."""
    seed += 10_007 * rank
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _history() -> dict[str, list]:
    return {"reward": [], "eval": []}


@dataclass
class TrainerState:
    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    update_rng: torch.Generator
    """Mini-batch order of the updates."""
    task: Any
    sampler: ProblemSampler
    monitor: RewardMonitor
    guard: RunGuard
    seed: int
    par: Parallel = field(default_factory=Parallel)
    """The trainer group (world 1: this process alone)."""
    step: int = 0
    """Steps completed."""
    consumed: int = 0
    """The sampler's position at the end of the last batch trained on (not of batches sampled
    ahead, async Ray): where a resume continues."""
    eval_before: Evaluation | None = None
    history: dict[str, list] = field(default_factory=_history)
    """'reward': reward/mean per step; 'eval': (step, accuracy) of the evaluations during the run."""

    @classmethod
    def create(
        cls, t: TrainConfig, seed: int, stuck_steps: int, model, task, guard: RunGuard, par: Parallel | None = None
    ) -> "TrainerState":
        """A run's first state: the optimizer and schedule of section train, the data order and update
        noise of `seed`, the reward monitor's reward.monitor.stuck_steps."""
        optimizer = build_optimizer(t, model)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda s: lr_factor(s, total=t.steps, warmup=t.warmup, schedule=t.lr_schedule, min_ratio=t.min_lr_ratio),
        )
        return cls(
            model,
            optimizer,
            scheduler,
            torch.Generator().manual_seed(seed),
            task,
            ProblemSampler(task, seed=seed),
            RewardMonitor(stuck_steps),
            guard,
            seed,
            par or Parallel(),
        )

    def state_dict(self, config: dict) -> dict[str, Any]:
        """What a checkpoint holds besides the weights; `config` is the run's resolved config."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "update_rng": self.update_rng.get_state(),
            "sampler_position": self.consumed,
            "rng": rng_state(),
            "eval_before": self.eval_before,
            "history": self.history,
            "monitor": self.monitor.state_dict(),
            "guard": self.guard.state_dict(),
            "config": config,
        }

    def restore(self, ckpt, *, rollback: bool = False) -> int:
        """Weights and state of a checkpoint (or the start snapshot); returns its step. A rollback
        keeps the guard's own count, lr scale and data seed: the lr is rescaled, the data reordered."""
        state = ckpt.trainer_state()
        if getattr(ckpt, "path", None) is not None and is_sharded(
            ckpt.path
        ):  # weights, optimizer state and this rank's RNG from its shards
            rng = load_sharded(ckpt.path, self.model, self.optimizer, self.par)
        else:
            if self.par.sharded:  # the start of the run (a rollback before any checkpoint): full weights
                load_full_weights(self.model, ckpt.model_dir)
            else:
                load_weights(self.model, ckpt.model_dir)
            self.optimizer.load_state_dict(state["optimizer"])
            rng = state["rng"]
        self.scheduler.load_state_dict(state["scheduler"])
        self.update_rng.set_state(state["update_rng"])
        set_rng_state(rng)
        self.monitor.load_state_dict(state["monitor"])
        self.guard.load_state_dict(state["guard"], rules_only=rollback)
        rescale_lr(self.optimizer, self.scheduler, self.guard.lr_scale / state["guard"]["lr_scale"])
        self.consumed = state["sampler_position"]
        self.sampler = ProblemSampler(self.task, seed=self.guard.data_seed(self.seed), position=self.consumed)
        self.eval_before, self.history = state["eval_before"], state["history"]
        self.step = ckpt.step
        return ckpt.step
