"""What the Ray actors build, asked of the assembly: an actor takes `ActorParts` (rlvr.assembly.on_ray's,
built from the run's config in the driver and shipped with the actor), never the config itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from rlvr.config import RewardConfig, SpeculativeConfig
from rlvr.inference.reference import ReferenceModel
from rlvr.rewards import Reward
from rlvr.rollout import RolloutEngine
from rlvr.rollout.episodes import EpisodeSpec
from rlvr.tools import ToolCall, ToolResult


class ActorParts(Protocol):
    engine_name: str
    """rollout.engine: vllm loads its weights itself."""
    dtype: str
    """The compute dtype (model.dtype)."""
    speculative: SpeculativeConfig
    partial_rollouts: bool
    """deploy.partial_rollouts: a rollout worker takes offered weights between decode steps."""
    reward: RewardConfig
    """Its learned components (reward.models, reward.judges), built on the inference pool."""

    def policy(self, path: str | Path, device) -> tuple[Any, Any]:
        """The policy at `path` (model and tokenizer) on `device`, as section model loads it."""

    def episodes(self, tool_host: Callable[[ToolCall, float], ToolResult] | None) -> EpisodeSpec:
        """What the rollouts run; tool_host: where the tool calls run (None: in this process)."""

    def rollout_engine(self, model, tokenizer, model_dir: str, episodes: EpisodeSpec) -> RolloutEngine:
        """rollout.engine on `model` (vllm: the weights at `model_dir`)."""

    def rule_reward(self) -> Reward:
        """The rules, with the environment's components."""

    def tools(self) -> dict:
        """env.tools, resolved (the reward workers run the rollout workers' calls)."""

    def reference(self, model, tokenizer) -> ReferenceModel:
        """The frozen reference of the KL term, a copy of `model`."""

    def teacher(self, tokenizer, device, path: str) -> ReferenceModel:
        """The distillation teacher from its directory `path`, on `device`."""

    def train(self, make_source: Callable, start: Path, device) -> dict:
        """The run's GRPO loop (rlvr.assembly.train) in the trainer actor on `device`, its batches from
        make_source(run_log); the summary."""

    def batch_source(self, workers: dict[str, list], pending_events: Sequence[dict], attempt: int, files):
        """The trainer's RayBatchSource over the actor pools (rank 0 of the trainer pool)."""
