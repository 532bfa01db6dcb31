"""Frozen models that score the policy's completions per token: the reference for the KL term, and the
teacher of on-policy distillation (algo.distill.teacher)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlvr.algos.truncation import Truncation
from rlvr.config.model import ModelConfig
from rlvr.configlib import ConfigError
from rlvr.models.gguf import ModelNotFound
from rlvr.models.loading import load_model, local_path, resolve_model
from rlvr.records import Completion
from rlvr.scoring import completion_logprobs


class ReferenceModel:
    """A frozen copy of the starting policy. Never built when beta = 0."""

    def __init__(
        self, model, pad_id: int, temperature: float, dtype: str = "float32", truncation: Truncation | None = None
    ):
        self.model = model.eval().requires_grad_(False)
        self.pad_id = pad_id
        self.temperature = temperature
        self.dtype = dtype  # compute precision (rlvr.scoring.compute)
        self.truncation = truncation
        """Sampling replay (rlvr.algos.truncation): scored over each token's kept set, as the policy is."""

    def logprobs(self, completions: Sequence[Completion]) -> torch.Tensor:
        """(N, T) fp32, right-padded with 0."""
        return completion_logprobs(
            self.model, completions, self.pad_id, self.temperature, dtype=self.dtype, truncation=self.truncation
        )


def teacher_path(name: str, model: ModelConfig) -> str:
    """The directory algo.distill.teacher (`name`) names, resolved as model.name is in section `model`
    ('smollm2', a directory, a hub id in the local cache); a ConfigError naming the key when there is none."""
    import dataclasses

    try:
        return local_path(resolve_model(dataclasses.replace(model, name=name, gguf_file=None)))
    except (ModelNotFound, OSError, ValueError) as exc:
        raise ConfigError(f"algo.distill.teacher: {name!r} does not load ({exc})") from None


def check_teacher_tokenizer(name: str, teacher_tokenizer, tokenizer) -> None:
    """A ConfigError naming algo.distill.teacher unless the teacher's tokenizer is the policy's, token
    for token: a teacher scores the student's own tokens."""
    if teacher_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(
            f"algo.distill.teacher: {name!r} has another tokenizer than the policy "
            f"({len(teacher_tokenizer)} tokens against {len(tokenizer)}, or other ids); a teacher "
            "scores the student's own tokens, so it must share the policy's tokenizer"
        )


def load_teacher(
    name: str, model_cfg: ModelConfig, temperature: float, tokenizer, device=None, path: str | None = None
) -> ReferenceModel:
    """The teacher `name` (algo.distill.teacher) as a frozen scorer at the sampling `temperature`,
    computing in model.dtype on `device` (the run's), from `path` (default: where the name resolves;
    an inference worker passes its node's copy); its tokenizer must be the policy's."""
    try:
        model, teacher_tokenizer = load_model(path or teacher_path(name, model_cfg))  # fp32; model.dtype computes
    except (OSError, ValueError) as exc:
        raise ConfigError(f"algo.distill.teacher: {name!r} does not load ({exc})") from None
    check_teacher_tokenizer(name, teacher_tokenizer, tokenizer)
    return ReferenceModel(
        model if device is None else model.to(device), tokenizer.pad_token_id, temperature, model_cfg.dtype
    )
