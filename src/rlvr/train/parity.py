"""The parity check of each step: the trainer's log-probs of the batch's sampled tokens, before the
update, against the engine's, and a cause named when they differ (rlvr.algos.parity).

Only sequences sampled by the weights the trainer holds count (policy_version == the trainer's,
no token of an older one): an older policy's tokens differ by design (deploy.async, sync_every > 1,
partial rollouts), which the update corrects. Where the trainer recomputed the batch's log-probs
(algo.recompute_logprobs) all of them are compared; otherwise those of the update's first
mini-batch, scored before its optimizer step (all of the batch with train.mini_batches=1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rlvr.algos import logprob_mismatch
from rlvr.algos.parity import ParityEvidence, attribute
from rlvr.algos.truncation import ReplayStats
from rlvr.records import Completion, fingerprint
from rlvr.rollout.sync import checksum, tied_names


def parity_metrics(
    trainer_logp: torch.Tensor,
    completions: Sequence[Completion],
    loss_mask: torch.Tensor,
    version: int,
    threshold: float,
    evidence: Callable[[], ParityEvidence],
) -> dict[str, float | str]:
    """rollout/parity_gap_mean|p99|max over the on-policy sequences trainer_logp (N, T) scored (NaN
    rows: not scored), and rollout/parity_cause with rollout/parity_evidence when the max exceeds
    `threshold` (algo.parity_threshold); evidence() is asked only then."""
    t = trainer_logp.shape[1]
    rows = [
        i
        for i, c in enumerate(completions)
        if c.policy_version == version
        and c.token_versions is None
        and float(loss_mask[i]) > 0
        and not bool(trainer_logp[i, : len(c.token_ids)].isnan().any())
    ]
    if not rows:
        return {}
    mask = torch.zeros(len(rows), t)  # (n, T)
    behaviour = torch.zeros(len(rows), t)
    for r, i in enumerate(rows):
        c = completions[i]
        mask[r, : len(c.token_ids)] = torch.tensor(c.mask, dtype=torch.float32)
        behaviour[r, : len(c.logprobs)] = torch.tensor(c.logprobs, dtype=torch.float32)
    stats = logprob_mismatch(trainer_logp[rows].nan_to_num(0.0), behaviour, mask)
    out: dict[str, float | str] = {
        f"rollout/parity_gap_{k}": stats[f"logprob_diff_{k}"] for k in ("mean", "p99", "max")
    }
    found = (
        attribute(stats["logprob_diff_max"], threshold, evidence()) if stats["logprob_diff_max"] > threshold else None
    )
    if found is not None:
        out["rollout/parity_cause"], out["rollout/parity_evidence"] = found
    return out


def batch_evidence(
    completions: Sequence[Completion],
    *,
    replayed: bool,
    replay: ReplayStats,
    engine_dtype: str,
    trainer_dtype: str,
    weights_mismatch: int,
) -> ParityEvidence:
    """The evidence a batch carries: its truncated tokens, its turns' fingerprints, the replay's
    findings, the two dtypes and the engines' weight checksums (see parity_metrics)."""
    truncated = sum(sum(1 for k, m in zip(c.kept, c.mask) if k and m) for c in completions if c.kept is not None)
    drifted = sum(
        1
        for c in completions
        for t in c.turns
        if t.role == "assistant" and t.sampled is not None and fingerprint(c.token_ids[t.start : t.end]) != t.sampled
    )
    return ParityEvidence(
        weights_mismatch=weights_mismatch,
        drifted_turns=drifted,
        truncated_tokens=truncated,
        replayed=replayed,
        set_mismatch=replay.set_mismatch,
        engine_dtype=engine_dtype,
        trainer_dtype=trainer_dtype,
    )


def engine_weights_differ(engine, model, version: int) -> int:
    """1 when an engine with weights of its own, which says it holds policy `version`, holds other
    ones than `model` (the checksum read back now, rlvr.rollout.sync); 0 when they agree, share the
    trainer's tensors, are another version's or cannot be read."""
    if getattr(engine, "sync_method", "shared") == "shared" or getattr(engine, "version", version) != version:
        return 0
    held = engine.weights_checksum()
    if held is None:
        return 0
    tied = tied_names(model)
    mine = checksum((t for name, t in model.state_dict().items() if name not in tied), engine.sync_dtype)
    return int(held != mine)


def engine_precision(engine) -> str:
    """The dtype an engine computes in: its compute precision (model.dtype), else its weights'."""
    dtype = getattr(engine, "dtype", None)
    if isinstance(dtype, str):
        return dtype
    held = getattr(engine, "sync_dtype", None)
    return str(held).removeprefix("torch.") if held is not None else "float32"


def configured_precision(config: dict) -> str:
    """The dtype a run's rollout engines compute in, from its config (as written to config.yaml):
    rollout.vllm.dtype for vLLM when set, else model.dtype."""
    rollout, model = config.get("rollout", {}), config.get("model", {})
    vllm = rollout.get("vllm", {}).get("dtype", "auto") if rollout.get("engine") == "vllm" else "auto"
    return vllm if vllm != "auto" else model.get("dtype", "float32")


def scores_as_sampled(model) -> bool:
    """Whether the model in training mode scores as the engine sampled: no dropout is active (its
    first mini-batch's log-probs are then the check's trainer side)."""
    if float(getattr(getattr(model, "config", None), "attention_dropout", 0.0) or 0.0) > 0:
        return False
    return not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
