"""Model and tokenizer loading: every model goes through AutoModelForCausalLM.

path = resolve_model(cfg.model)                  # 'smollm2', a .gguf, a directory or a hub id -> loadable
model, tok = load_policy(cfg.model, path)        # dtype, gradient checkpointing, LoRA
ref = reference_policy(model)                    # the adapter switched off, or a frozen copy
export_model(model, tok, "runs/x/model")         # merged, safetensors + tokenizer + chat template
"""

from __future__ import annotations

from rlvr.models.gguf import ModelNotFound
from rlvr.models.loading import DTYPES, ensure_trainable, load_model, load_tokenizer, resolve_model, save_model
from rlvr.models.policy import export_model, load_policy, reference_policy

__all__ = [
    "DTYPES",
    "ModelNotFound",
    "ensure_trainable",
    "export_model",
    "load_model",
    "load_policy",
    "load_tokenizer",
    "reference_policy",
    "resolve_model",
    "save_model",
]
