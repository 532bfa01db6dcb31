"""The policy a run trains, its reference, and the model it hands back.

Full fine-tuning trains every weight and keeps a frozen copy as the
reference (only when algo.beta > 0). With `model.lora.enabled` only a LoRA
adapter trains; the reference is the same weights with the adapter
disabled, and checkpoints hold just the adapter. Either way the exported
`runs/<name>/model/` is a plain Hugging Face model (adapter merged).
"""

from __future__ import annotations

import copy
from pathlib import Path

from rlvr.models import lora
from rlvr.models.loading import ensure_trainable, load_model, save_model


def load_policy(mcfg, start_path: str | Path, device=None):
    """(model, tokenizer) ready to train from `start_path`: fp32 weights, gradient checkpointing, LoRA,
    on `device` (train.device; default the CPU). A resume then loads checkpoint weights into it
    (rlvr.checkpoint.load_weights)."""
    # fp32 master weights whatever model.dtype: bfloat16 is a compute precision (rlvr.scoring.compute),
    # so AdamW's updates and moments are never rounded to bf16
    model, tokenizer = load_model(start_path, "float32", gradient_checkpointing=mcfg.gradient_checkpointing)
    ensure_trainable(model)
    if device is not None:
        model = model.to(device)
    lcfg = mcfg.lora
    if lcfg.enabled:
        model = lora.apply_lora(
            model, r=lcfg.r, alpha=lcfg.alpha, dropout=lcfg.dropout, target_modules=lcfg.target_modules
        )
    return model, tokenizer


def reference_policy(model):
    """The frozen starting policy for the KL term, as something `ReferenceModel` can call: with
    LoRA the same weights with the adapter off (no second copy), else a copy taken now (before
    a resume loads checkpoint weights into `model`)."""
    if lora.is_peft(model):
        return lora.AdapterDisabled(model)
    return copy.deepcopy(model)


def export_model(model, tokenizer, path: str | Path, *, max_new_tokens: int | None = None):
    """Write the final model as plain Hugging Face files (safetensors, config, generation config,
    tokenizer and chat template), loadable with `AutoModelForCausalLM.from_pretrained` alone.
    max_new_tokens: the run's recommended inference length, written to generation_config.json,
    where `rlvr eval`, `rlvr serve`, transformers' `generate` and vLLM take their default from.

    A LoRA adapter is merged into the weights in place, so call this last; returns the plain model.
    """
    plain = lora.merged(model)
    if max_new_tokens is not None and plain.generation_config is not None:
        plain.generation_config.max_new_tokens = int(max_new_tokens)
    # transformers >= 5 renamed gradient to activation checkpointing; the old property warns when read
    checkpointing = (
        plain.is_activation_checkpointing
        if hasattr(type(plain), "is_activation_checkpointing")
        else plain.is_gradient_checkpointing
    )
    if checkpointing:
        (getattr(plain, "activation_checkpointing_disable", None) or plain.gradient_checkpointing_disable)()
    plain.config.use_cache = True
    save_model(plain, tokenizer, path)
    return plain
