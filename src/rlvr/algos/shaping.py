"""Reward shaping that depends only on the completion, not on the verifier."""

from __future__ import annotations

from torch import Tensor

__all__ = ["overlong_penalty"]


def overlong_penalty(lengths: Tensor, max_len: int, buffer: int, penalty: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment, (N,) fp32, <= 0: add it to the rewards.

    0 up to max_len - buffer tokens, then falling linearly to -penalty at
    max_len, and -penalty beyond. A truncated answer is usually unfinished;
    the ramp tells the policy "too long" before the hard cut instead of
    punishing a sequence one token over the limit as hard as a rambling one.

    lengths (N,): completion lengths in tokens; max_len: the generation budget
    (rollout.max_new_tokens); buffer: ramp width in tokens, 0 < buffer <= max_len.
    """
    if not 0 < buffer <= max_len:
        raise ValueError(f"overlong buffer must satisfy 0 < buffer <= max_len, got buffer={buffer}, max_len={max_len}")
    lengths = lengths.float()  # (N,)
    over = (lengths - (max_len - buffer)).clamp(min=0.0, max=float(buffer))  # (N,) tokens into the buffer
    return -penalty * over / buffer  # (N,)
