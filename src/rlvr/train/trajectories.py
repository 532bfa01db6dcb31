"""What the update trains on, from trajectories: one sequence each, or one per assistant turn.

    view = training_view(completions, advantages, loss_mask, credit="trajectory", ...)
    policy_update(model, optimizer, view.sequences, view.advantages, view.loss_mask, ...)

A trajectory whose turns all saw the whole history is one sequence: prompt + every
token, the loss on its sampled tokens (Completion.mask), one advantage. Otherwise
each assistant turn is a sequence of its own, scored in exactly the context the policy
sampled it in: with env.history = k, the prompt and the last k exchanges; with
env.credit = turn, the whole history but its own advantage.

Per-turn credit (env.credit = turn, rlvr.algos.turn_advantages): turn k's tokens get
A_k = A - P_k / s, where A is the trajectory's group-relative advantage, P_k the weighted
environment reward of the turns before k, and s the advantage's scale (the group's std +
eps with algo.scale = group, the batch's with batch, 1 with none): the advantage of the
return from turn k on, against the same baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rlvr.algos.advantages import advantage_scale, turn_advantages, zero_variance_groups
from rlvr.records import Completion, Turn


@dataclass
class TrainView:
    sequences: list[Completion]  # (S,)
    advantages: torch.Tensor  # (S,)
    loss_mask: torch.Tensor  # (S,)
    owner: list[int]  # (S,) the trajectory each sequence comes from

    def select(self, rows: Sequence[int]) -> tuple["TrainView", torch.Tensor]:
        """The sequences of trajectories `rows` (renumbered 0..), and their indices here."""
        new = {r: k for k, r in enumerate(rows)}
        keep = [s for s, o in enumerate(self.owner) if o in new]
        idx = torch.tensor(keep, dtype=torch.long)
        return TrainView(
            [self.sequences[s] for s in keep],
            self.advantages[idx],
            self.loss_mask[idx],
            [new[self.owner[s]] for s in keep],
        ), idx


def split_by_turn(c: Completion, credit: str) -> bool:
    """Whether a trajectory trains as one sequence per assistant turn."""
    turns = [t for t in c.turns if t.role == "assistant"]
    return len(turns) > 1 and (credit == "turn" or any(t.context_start or t.context is not None for t in turns))


def turn_sequences(c: Completion) -> list[Completion]:
    """One sequence per assistant turn, in the context that turn was sampled in."""
    out = []
    for t in (t for t in c.turns if t.role == "assistant"):
        out.append(
            Completion(
                problem_id=c.problem_id,
                group_id=c.group_id,
                index=c.index,
                text=t.text,
                prompt_ids=t.context
                if t.context is not None
                else c.prompt_ids + c.token_ids[t.context_start : t.start],
                token_ids=c.token_ids[t.start : t.end],
                logprobs=c.logprobs[t.start : t.end],
                kept=None if c.kept is None else c.kept[t.start : t.end],
                finish_reason=c.finish_reason,
                policy_version=c.policy_version,
                token_versions=None if c.token_versions is None else c.token_versions[t.start : t.end],
                turns=[Turn("assistant", 0, t.end - t.start, t.text, sampled=t.sampled)],
            )
        )
    return out


def _weighted(components: dict[str, float], weights: dict[str, float]) -> float:
    return float(sum(w * components.get(name, 0.0) for name, w in weights.items()))


def training_view(
    completions: Sequence[Completion],
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    shaped: torch.Tensor,
    *,
    credit: str,
    weights: dict[str, float],
    group_size: int,
    scale: str,
    eps: float,
) -> TrainView | None:
    """The sequences the update sees; None when every trajectory is one sequence with its advantage
    (single-turn runs: the batch is trained as it is)."""
    if not any(split_by_turn(c, credit) for c in completions):
        return None
    denom = advantage_scale(shaped, group_size, scale, eps)  # (N,)
    flat = zero_variance_groups(shaped, group_size).repeat_interleave(group_size).tolist()  # (N,) no signal at all
    seqs, advs, masks, owner = [], [], [], []
    for i, c in enumerate(completions):
        if not split_by_turn(c, credit):
            seqs.append(c), advs.append(float(advantages[i])), masks.append(float(loss_mask[i])), owner.append(i)
            continue
        turns = [t for t in c.turns if t.role == "assistant"]
        own_credit = credit == "turn" and not flat[i]  # else every turn keeps the trajectory's advantage
        rewards = [_weighted(t.info.get("components", {}), weights) for t in turns]
        per_turn = turn_advantages(float(advantages[i]), rewards, float(denom[i]) if own_credit else None)
        for seq, adv in zip(turn_sequences(c), per_turn):
            seqs.append(seq), advs.append(adv), masks.append(float(loss_mask[i])), owner.append(i)
    return TrainView(seqs, torch.tensor(advs, dtype=torch.float32), torch.tensor(masks, dtype=torch.float32), owner)
