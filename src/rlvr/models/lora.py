"""LoRA through PEFT: adapters on chosen modules, the base as the reference, merge on export.

The reference policy of a LoRA run is the base model itself, reached by
disabling the adapter for one forward pass, so no second copy of the
weights is ever held. PEFT is imported only when LoRA is switched on.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch


def _peft():
    try:
        import peft
    except ImportError as exc:
        raise ImportError("model.lora.enabled needs PEFT: `pip install 'rlvr[lora]'` (or `pip install peft`)") from exc
    return peft


def is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def apply_lora(model, *, r: int, alpha: float, dropout: float, target_modules: list[str]):
    """Wrap `model` with a fresh LoRA adapter; only the adapter's weights stay trainable."""
    peft = _peft()
    targets: str | list[str] = "all-linear" if target_modules == ["all-linear"] else list(target_modules)
    config = peft.LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none", task_type="CAUSAL_LM"
    )
    try:
        with warnings.catch_warnings():  # PEFT reads transformers' deprecated gradient-checkpointing property
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            wrapped = peft.get_peft_model(model, config)
    except ValueError as exc:  # PEFT names no module when none matched
        names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ValueError(
            f"model.lora.target_modules={list(target_modules)}: {exc}. Linear modules of this model: {names}"
        ) from None
    # the run's starting point, for a rollback before the first checkpoint (a few MB at most)
    wrapped.rlvr_initial_adapter = {k: v.detach().clone() for k, v in peft.get_peft_model_state_dict(wrapped).items()}
    return wrapped


def load_adapter_state(model, model_dir: str | Path) -> None:
    """Load adapter weights in place: from a checkpoint (adapter_model.safetensors), or, for a
    directory holding a full model (the run's start), the adapter as it was created: the base
    weights never change in a LoRA run, so that is exactly the starting policy."""
    peft = _peft()
    from safetensors.torch import load_file

    path = Path(model_dir) / "adapter_model.safetensors"
    if path.is_file():
        state = load_file(str(path))
    elif (Path(model_dir) / "config.json").is_file():
        state = model.rlvr_initial_adapter
    else:
        raise FileNotFoundError(f"{model_dir}: neither adapter weights (adapter_model.safetensors) nor a model")
    result = peft.set_peft_model_state_dict(model, state)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"{model_dir}: adapter weights do not fit this model/LoRA config: {unexpected[:5]}")


class AdapterDisabled:
    """The base model under a PEFT adapter, as a frozen reference: the adapter is off and the
    model in eval mode for each call, and both are restored afterwards. The shared weights stay
    trainable, which is why `eval()` and `requires_grad_()` here leave the model alone."""

    def __init__(self, model):
        self.model = model

    def eval(self) -> AdapterDisabled:
        return self

    def requires_grad_(self, _flag: bool = False) -> AdapterDisabled:
        return self

    def parameters(self):
        return self.model.parameters()

    @torch.no_grad()
    def __call__(self, *args, **kwargs):
        was_training = self.model.training
        self.model.eval()
        try:
            with self.model.disable_adapter():
                return self.model(*args, **kwargs)
        finally:
            self.model.train(was_training)


def merged(model):
    """The plain transformers model with the adapter folded into its weights (in place: call last)."""
    return model.merge_and_unload() if is_peft(model) else model
