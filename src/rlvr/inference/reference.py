"""Frozen reference model: per-token log-probs of completions for the KL term."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlvr.records import Completion
from rlvr.scoring import completion_logprobs


class ReferenceModel:
    """A frozen copy of the starting policy. Never built when beta = 0."""

    def __init__(self, model, pad_id: int, temperature: float, dtype: str = "float32"):
        self.model = model.eval().requires_grad_(False)
        self.pad_id = pad_id
        self.temperature = temperature
        self.dtype = dtype  # compute precision (rlvr.scoring.compute)

    def logprobs(self, completions: Sequence[Completion]) -> torch.Tensor:
        """(N, T) fp32, right-padded with 0."""
        return completion_logprobs(self.model, completions, self.pad_id, self.temperature, dtype=self.dtype)
