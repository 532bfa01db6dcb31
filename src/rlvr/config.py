"""The run configuration: one dataclass per concern, nested in `Config`.

Load with `load_config(path, overrides)`; every key is validated up front
(see `rlvr.configlib`). Keys that scripts rely on keep their names:
seed, run.dir, model.name, task.name, train.steps, train.lr,
rollout.batch_size, rollout.group_size, rollout.temperature,
rollout.max_new_tokens, algo.loss_type, algo.beta, eval.n, ckpt.every,
ckpt.resume, deploy.backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rlvr import configlib
from rlvr.configlib import ConfigError, require
from rlvr.rewards.config import RewardConfig

__all__ = ["Config", "ConfigError", "load_config"]


@dataclass
class RunConfig:
    dir: str | None = None
    """Run directory; default runs/<name>."""
    name: str = "default"
    progress: bool = True
    """Live progress bar and summary table on the console."""


@dataclass
class ModelConfig:
    name: str = "tiny"
    """'tiny' (built locally, no download) or a Hugging Face model directory / hub id."""
    init_from: str | None = None
    """Start RL from this checkpoint directory instead of running cold-start SFT."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    tiny_hidden: int = 128
    tiny_layers: int = 4
    tiny_heads: int = 4


@dataclass
class TaskConfig:
    name: str = "arithmetic"
    """Built-in task ('arithmetic') or a path to a data file."""
    min_digits: int = 1
    max_digits: int = 3
    ops: list[str] = field(default_factory=lambda: ["+"])
    """Operators used by the arithmetic task: any of '+', '-', '*'."""
    eval_size: int = 500
    """Held-out problems, never used in training."""


@dataclass
class SFTConfig:
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 20
    examples: int = 20000
    """Worked examples generated for cold-start SFT (disjoint from the held-out set)."""
    teacher_error: float = 0.0
    """Chance that a cold-start demonstration forgets each carry/borrow (an imperfect teacher)."""
    cache_dir: str = ".cache/sft"
    """SFT checkpoints are cached here keyed by their config, so a second run reuses them."""


@dataclass
class RolloutConfig:
    backend: Literal["hf", "vllm"] = "hf"
    batch_size: int = 16
    """Prompts per step."""
    group_size: int = 8
    """G: completions sampled per prompt."""
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        require(self.group_size >= 2, "group_size", f"must be >= 2 (advantages compare completions within a group), got {self.group_size}")
        require(self.temperature > 0, "temperature", f"must be > 0, got {self.temperature}")
        require(0 < self.top_p <= 1, "top_p", f"must be in (0, 1], got {self.top_p}")
        require(self.max_new_tokens >= 1, "max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")


@dataclass
class AlgoConfig:
    advantage: Literal["grpo", "rloo"] = "grpo"
    scale: Literal["group", "batch", "none"] = "group"
    """Divide advantages by the group std ('group'), the batch std, or not at all (Dr. GRPO)."""
    eps: float = 1e-6
    loss_type: Literal["grpo", "token_mean", "dr_grpo"] = "grpo"
    clip_low: float = 0.2
    clip_high: float = 0.2
    beta: float = 0.0
    """KL coefficient to the reference model; 0 loads no reference model at all."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    dual_clip: float | None = None
    """Dual-clip constant c > 1 bounding the loss of negative-advantage tokens (None = off)."""
    ratio_level: Literal["token", "sequence"] = "token"
    """Importance ratio per token (PPO/GRPO) or per sequence (GSPO)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient (0 = off; entropy is reported either way)."""
    kl_in_reward: bool = False
    """Fold beta * sum of per-token KL into each completion's reward before advantages (RLOO/PPO-RLHF
    style) instead of adding it to the loss; algo.kl_estimator picks the estimator (k1 is usual here)."""
    filter_zero_std: bool = False
    """Dynamic sampling (DAPO): drop groups whose rewards are all equal and sample more prompts
    until rollout.batch_size groups with signal are collected (at most algo.max_extra_rounds more)."""
    max_extra_rounds: int = 3
    """Extra sampling rounds per step for algo.filter_zero_std; a batch still short after them
    trains on the groups it has and logs the shortfall."""
    mask_truncated: bool = False
    """Exclude completions cut at rollout.max_new_tokens (finish reason 'length') from the loss."""
    overlong_buffer: int = 0
    """DAPO soft overlong punishment: the penalty ramps up over the last N tokens before
    rollout.max_new_tokens (0 = off)."""
    overlong_penalty: float = 1.0
    """Reward subtracted at (and beyond) rollout.max_new_tokens when algo.overlong_buffer > 0."""
    noise_std: float = 0.0
    """Gaussian noise added to rewards before normalisation to break ties (0 = off); groups
    with no reward variance stay at zero advantage."""

    def __post_init__(self) -> None:
        require(self.max_extra_rounds >= 0, "max_extra_rounds", f"must be >= 0, got {self.max_extra_rounds}")
        require(self.overlong_buffer >= 0, "overlong_buffer", f"must be >= 0 tokens, got {self.overlong_buffer}")
        require(self.overlong_penalty >= 0, "overlong_penalty", f"must be >= 0, got {self.overlong_penalty}")
        require(self.noise_std >= 0, "noise_std", f"must be >= 0, got {self.noise_std}")
        require(self.beta >= 0, "beta", f"must be >= 0, got {self.beta}")


@dataclass
class TrainConfig:
    steps: int = 150
    lr: float = 1e-3
    ppo_epochs: int = 2
    """mu: policy updates per rollout batch, using the stored old log-probs."""
    mini_batches: int = 1
    """Optimizer steps per epoch: the rollout batch is split into this many mini-batches."""
    micro_batch_size: int = 0
    """Sequences per forward/backward (gradient accumulation); 0 = the whole mini-batch."""
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    warmup: int = 0
    threads: int = 0
    """torch CPU threads; 0 = all cores."""

    def __post_init__(self) -> None:
        require(self.steps >= 0, "steps", f"must be >= 0, got {self.steps}")
        require(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        require(self.ppo_epochs >= 1, "ppo_epochs", f"must be >= 1, got {self.ppo_epochs}")
        require(self.mini_batches >= 1, "mini_batches", f"must be >= 1, got {self.mini_batches}")


@dataclass
class EvalConfig:
    n: int = 500
    """Held-out problems scored greedily before and after training."""
    every: int = 50
    """Evaluate every N steps (0 = only before and after)."""
    n_during: int = 200
    batch_size: int = 500


@dataclass
class CkptConfig:
    every: int = 50
    keep: int = 2
    resume: str | None = None
    """'auto' resumes from the newest valid checkpoint in the run directory, or a checkpoint path."""


@dataclass
class DeployConfig:
    backend: Literal["embedded", "ray"] = "embedded"


@dataclass
class LogConfig:
    samples_per_step: int = 4
    tensorboard: bool = True


@dataclass
class Config:
    seed: int = 0
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ckpt: CkptConfig = field(default_factory=CkptConfig)
    deploy: DeployConfig = field(default_factory=DeployConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        # settings that span two sections
        require(self.algo.overlong_buffer <= self.rollout.max_new_tokens, "algo.overlong_buffer",
                f"the penalty ramp ({self.algo.overlong_buffer} tokens) must fit in rollout.max_new_tokens "
                f"({self.rollout.max_new_tokens})")

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir or Path("runs") / self.run.name)

    def to_dict(self) -> dict:
        return configlib.to_dict(self)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    return configlib.load(Config, path, overrides)
