"""Mixed precision (model.dtype=bfloat16): bf16 compute, fp32 master weights and optimizer state.
On the tiny model its updates track fp32's, where a model cast to bf16 whole loses them."""

from __future__ import annotations

import copy

import torch
from helpers import sample, split_settings

from rlvr.config import load_config
from rlvr.models import load_policy
from rlvr.models.tiny import save_tiny
from rlvr.records import Problem
from rlvr.rollout import SamplingParams
from rlvr.scoring import compute
from rlvr.train.update import policy_update

LR, STEPS = 2e-5, 10  # a small step: below bf16's resolution for weights of size ~0.02


def _updates(model, tok, completions, kind: str):
    """10 policy updates; returns the actor/loss of each and the weight displacement (fp32)."""
    if kind == "pure_bf16":
        model = model.to(torch.bfloat16)  # what model.dtype=bfloat16 used to do: weights and AdamW in bf16
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.99))
    settings = split_settings(
        dict(
            ppo_epochs=1,
            mini_batches=1,
            micro_batch_size=0,
            max_grad_norm=1.0,
            temperature=1.0,
            loss_type="token_mean",
            dtype="bfloat16" if kind == "mixed" else "float32",
        )
    )
    start = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5] * (len(completions) // 4))
    losses = [
        policy_update(
            model,
            opt,
            completions,
            adv,
            torch.ones(len(completions)),
            None,
            tok.pad_token_id,
            settings,
            generator=torch.Generator().manual_seed(i),
        )["actor/loss"]
        for i in range(STEPS)
    ]
    assert all(p.dtype == (torch.bfloat16 if kind == "pure_bf16" else torch.float32) for p in model.parameters())
    return losses, torch.cat([p.detach().float().flatten() for p in model.parameters()]) - start


def test_bf16_mixed_precision_tracks_fp32_where_a_pure_bf16_update_does_not(tmp_path):
    save_tiny(tmp_path, hidden=64, layers=2, heads=2, seed=0)
    cfg = load_config(None, ["model.dtype=bfloat16"])
    base, tok = load_policy(cfg.model, tmp_path)
    assert all(p.dtype == torch.float32 for p in base.parameters())  # master weights stay fp32
    with torch.no_grad(), compute(base, "bfloat16"):
        assert base(torch.tensor([[3, 4, 5]])).logits.dtype == torch.bfloat16  # and the compute is bf16
    torch.manual_seed(0)
    completions = sample(
        base,
        tok,
        [Problem(id=str(i), prompt=f"{i}+{i + 3}=") for i in range(4)],
        SamplingParams(group_size=4, max_new_tokens=12),
    )
    runs = {kind: _updates(copy.deepcopy(base), tok, completions, kind) for kind in ("fp32", "mixed", "pure_bf16")}
    ref_losses, ref_delta = runs["fp32"]

    def gap(kind):  # largest loss difference to fp32 over the curve, and the update's direction
        losses, delta = runs[kind]
        return (
            max(abs(a - b) for a, b in zip(losses, ref_losses)),
            float(torch.nn.functional.cosine_similarity(delta, ref_delta, dim=0)),
            float(delta.norm() / ref_delta.norm()),
        )

    loss_gap, cos, ratio = gap("mixed")
    assert 0 < loss_gap < 2e-3 and cos > 0.99 and 0.95 < ratio < 1.05, (loss_gap, cos, ratio)
    loss_gap, cos, ratio = gap("pure_bf16")
    assert loss_gap > 5e-3 and cos < 0.9, (loss_gap, cos, ratio)  # rounded-away updates: another direction
