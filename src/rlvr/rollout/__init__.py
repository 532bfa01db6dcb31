"""Rollout: G sampled completions per prompt, behind one engine protocol (rlvr.rollout.engine).

    hf    transformers `generate`                                   rlvr.rollout.hf.HFEngine
    loop  rlvr's decode loop: shared prefill, finished rows dropped rlvr.rollout.decode.LoopEngine
"""

from __future__ import annotations

from rlvr.rollout.decode import LoopEngine
from rlvr.rollout.engine import ModelEngine, RolloutEngine, SamplingParams, render_prompt, sampling_params
from rlvr.rollout.hf import HFEngine

ENGINES: dict[str, type[ModelEngine]] = {"hf": HFEngine, "loop": LoopEngine}

__all__ = ["ENGINES", "HFEngine", "LoopEngine", "RolloutEngine", "SamplingParams", "build_engine", "render_prompt",
           "sampling_params"]


def build_engine(rollout, model, tokenizer, *, max_rows: int = 512) -> RolloutEngine:
    """The engine `rollout.engine` names (a `RolloutConfig`), sampling with `model` in this process."""
    return ENGINES[rollout.engine](model, tokenizer, max_rows=max_rows)
