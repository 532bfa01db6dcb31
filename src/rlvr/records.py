"""Typed records that cross module boundaries.

Rollout produces `Completion`s from `Problem`s, rewards turn each into a
`RewardResult`, and training packs them into a `StepBatch` of tensors.
A module takes and returns these records and never reaches into another
module's internals, so any module can move to its own process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Message = dict[str, str]  # {"role": "user" | "system" | "assistant", "content": str}

VERIFIER_NAMES = frozenset({"math", "code"})
"""The values of Problem.verifier: each names a verifier of rlvr.rewards (VERIFIERS)."""


@dataclass(frozen=True)
class Problem:
    id: str
    prompt: str | list[Message]
    """Plain text, or chat messages rendered with the tokenizer's chat template."""
    answer: str | None = None
    """Gold answer for outcome verifiers (math)."""
    tests: dict[str, Any] | None = None
    """Unit tests for the code verifier (see rlvr.sandbox)."""
    source: str = "default"
    """Data set or task name; metrics are reported per source."""
    verifier: str = "math"
    """One of VERIFIER_NAMES."""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Completion:
    problem_id: str
    group_id: int
    """Completions of one prompt share a group id; groups are never found by prompt text."""
    index: int
    """Position within the group, 0..G-1."""
    text: str
    prompt_ids: list[int]
    token_ids: list[int]
    """Generated tokens only, including the end-of-sequence token when it was produced."""
    logprobs: list[float]
    """Behaviour-policy log-prob of each generated token (same length as token_ids)."""
    finish_reason: Literal["stop", "length"]
    policy_version: int = 0


@dataclass
class RewardResult:
    total: float
    components: dict[str, float] = field(default_factory=dict)
    valid: bool = True
    """False when the reward could not be computed (exception, timeout, bad gold).
    An invalid sample is excluded from the loss and counted, never fatal."""
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def invalid(cls, error: str, components: dict[str, float] | None = None) -> "RewardResult":
        return cls(total=0.0, components=dict(components or {}), valid=False, error=error)
