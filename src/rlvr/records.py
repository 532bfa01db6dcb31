"""Typed records that cross module boundaries.

Rollout produces `Completion`s from `Problem`s, rewards turn each into a
`RewardResult`, and training packs them into a `StepBatch` of tensors.
A module takes and returns these records and never reaches into another
module's internals, so any module can move to its own process.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Message = dict[str, str]  # {"role": "user" | "system" | "assistant", "content": str}


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
    """A name in rlvr.rewards.VERIFIERS: 'math', 'code', 'env' (the episode's success, as the environment
    reports it)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    solution: str | None = None
    """A worked solution as the model should write it (data files: `solution`, or chat messages
    ending with an assistant turn): what cold-start SFT imitates. Never shown to the policy."""


def fingerprint(ids: Sequence[int]) -> int:
    """A token sequence's CRC-32 (the same in every process)."""
    return zlib.crc32(b"".join(i.to_bytes(4, "little", signed=True) for i in ids))


FinishReason = Literal["stop", "length", "max_turns", "env_done"]


@dataclass
class Turn:
    """One turn of a trajectory: what the policy sampled, or what an environment or tool appended."""

    role: Literal["assistant", "env"]
    start: int
    """Span of the turn in Completion.token_ids: [start, end)."""
    end: int
    text: str
    context_start: int = 0
    """assistant turns: where in token_ids the context the policy saw for this turn begins (after the
    prompt); 0 with the full history, later with env.history = k (the last k turns only)."""
    info: dict[str, Any] = field(default_factory=dict)
    """assistant turns: `tool_calls` [{name, arguments, ok, error, timeout}]; env turns: the step's
    `components` and the environment's own info."""
    context: list[int] | None = None
    """assistant turns sampled in a history an agent program rewrote (rlvr.agents): the whole context the
    policy saw; None: the prompt and token_ids[context_start:start]."""
    sampled: int | None = None
    """assistant turns: `fingerprint` of the token ids as the engine sampled them, which the parity
    check compares with token_ids[start:end] (a turn re-encoded on its way to the trainer differs)."""


@dataclass
class Completion:
    """A trajectory: one or more assistant turns, with what an environment or tool answered in
    between. A single-turn completion is a trajectory of one turn."""

    problem_id: str
    group_id: int
    """Completions of one prompt share a group id; groups are never found by prompt text."""
    index: int
    """Position within the group, 0..G-1."""
    text: str
    """The last assistant turn's text: what the verifier grades (the whole completion for one turn)."""
    prompt_ids: list[int]
    token_ids: list[int]
    """Every token after the prompt: the ones the engine sampled (ending with the end-of-sequence token
    when it was produced) and the ones environments appended, each exactly once, never re-tokenised."""
    logprobs: list[float]
    """Behaviour-policy log-prob of each token of token_ids (0.0 on appended tokens): under the
    distribution it was drawn from, truncated and renormalised when rollout.top_k/top_p/min_p cut it."""
    finish_reason: FinishReason
    """'stop' / 'length' (the last turn ended with eos / at its token budget), 'max_turns' (env.max_turns
    reached), 'env_done' (the environment ended the episode after a turn it answered)."""
    policy_version: int = 0
    """Updates applied to the policy that sampled it; with partial rollouts, the oldest that sampled one
    of its tokens (the staleness bound holds for every token)."""
    token_versions: list[int] | None = None
    """Per token of token_ids: the policy version that sampled it (deploy.partial_rollouts: the weights
    changed while it was sampled); None: policy_version for every token."""
    loss_mask: list[int] | None = None
    """Per token of token_ids: 1 = sampled by the policy (trained on), 0 = appended by an environment.
    None: every token was sampled (a trajectory of one turn)."""
    kept: list[int] | None = None
    """Per token of token_ids: the record of the set a truncated distribution kept (its size and a
    hash, rlvr.algos.truncation; 0 untruncated or appended), for the trainer's sampling replay.
    None: nothing was truncated."""
    turns: list[Turn] = field(default_factory=list)
    env_components: dict[str, float] = field(default_factory=dict)
    """Reward components the environment gave, summed over the steps (weighted by reward.weights)."""
    env_info: dict[str, Any] = field(default_factory=dict)
    """What the environment reported at the end: `success` (for verifier 'env'), `return`, ..."""

    @property
    def mask(self) -> list[int]:
        """1 on the tokens the policy sampled: what the loss and the behaviour log-probs cover."""
        return self.loss_mask if self.loss_mask is not None else [1] * len(self.token_ids)


@dataclass
class RewardResult:
    total: float
    components: dict[str, float] = field(default_factory=dict)
    valid: bool = True
    """False when the reward could not be computed (exception, timeout, bad gold).
    An invalid sample is excluded from the loss and counted, never fatal."""
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    rules_total: float | None = None
    """The total before learned components (reward models, judges) were added to it, whose
    advantages are taken apart (rlvr.algos.decoupled_advantages); None: the total is all rules."""

    @classmethod
    def invalid(cls, error: str, components: dict[str, float] | None = None) -> "RewardResult":
        return cls(total=0.0, components=dict(components or {}), valid=False, error=error)
