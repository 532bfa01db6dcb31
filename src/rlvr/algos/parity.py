"""The engine/trainer log-prob parity check: how far apart, and why.

    stats = logprob_mismatch(trainer_logp, behaviour_logp, mask)    # logprob_diff_mean|p99|max
    found = attribute(stats["logprob_diff_max"], threshold, evidence)  # None, or (cause, one line)

An RL update compares the trainer's log-probs of each sampled token with the engine's. With the same
weights, dtype and kernels they agree to ~1e-5 in fp32; a larger gap has one of five causes, each
with its own evidence, checked in this order (the first that holds is named):

    weights     the engine holds other weights than the trainer (checksum after the sync, or read
                back when the gap appeared): stale or corrupt
    template    a turn's tokens differ from what the engine sampled (re-encoded on their way: a chat
                template or an agent program that re-tokenised the turn)
    truncation  tokens drawn from a truncated distribution (rollout.top_k/top_p/min_p) scored over
                the whole vocabulary (rollout.sampling_replay off)
    precision   the engine and the trainer compute in different dtypes, or in bf16 (its rounding)
    truncation  the trainer's rebuilt kept sets hash otherwise than the engine's
    kernel      none of these: the same weights, dtype and sets, and still a gap (another kernel path)
"""

from __future__ import annotations

from dataclasses import dataclass

CAUSES = ("weights", "template", "truncation", "precision", "kernel")


@dataclass(frozen=True)
class ParityEvidence:
    """What the trainer knows about one batch beyond the two sets of log-probs."""

    weights_mismatch: int = 0
    """Engines whose weights' checksum differs from the trainer's."""
    drifted_turns: int = 0
    """Assistant turns whose tokens differ from what the engine sampled (rlvr.records.fingerprint)."""
    truncated_tokens: int = 0
    """Sampled tokens drawn from a truncated distribution."""
    replayed: bool = True
    """The trainer renormalised those over their kept sets (rollout.sampling_replay)."""
    set_mismatch: int = 0
    """Rebuilt kept sets whose hash differs from the engine's."""
    engine_dtype: str = "float32"
    trainer_dtype: str = "float32"


def attribute(gap_max: float, threshold: float, e: ParityEvidence) -> tuple[str, str] | None:
    """(cause in CAUSES, the evidence in words) when the largest gap exceeds `threshold`, else None."""
    if not gap_max > threshold:
        return None
    if e.weights_mismatch:
        return "weights", f"{e.weights_mismatch} engine(s) hold weights whose checksum is not the trainer's"
    if e.drifted_turns:
        return "template", f"{e.drifted_turns} turn(s) reached the trainer as other tokens than were sampled"
    if e.truncated_tokens and not e.replayed:
        return "truncation", (
            f"{e.truncated_tokens} token(s) drawn from a truncated distribution scored over the whole "
            "vocabulary (rollout.sampling_replay=false)"
        )
    if e.engine_dtype != e.trainer_dtype:
        return "precision", f"the engine computes in {e.engine_dtype}, the trainer in {e.trainer_dtype}"
    if e.engine_dtype == "bfloat16":
        return "precision", "the engine and the trainer both compute in bfloat16: gaps of ~1e-2 are its rounding"
    if e.set_mismatch:
        return "truncation", f"{e.set_mismatch} rebuilt kept set(s) differ from the engine's"
    return "kernel", "the same weights, dtype and kept sets: the engine's kernels compute otherwise"
