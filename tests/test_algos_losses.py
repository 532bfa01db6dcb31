"""rlvr.algos: policy_loss, its aggregations, and token_logprobs.

The vectorised loss is compared with a per-token Python loop (loss value and
gradient) on random inputs that hit every branch: both clip sides, dual clip,
float mask weights, a fully masked sequence.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algos import LOSS_AGGREGATIONS, LOG_RATIOS, LossSettings, LossType, RatioLevel, policy_loss, token_logprobs

# --- naive reference --------------------------------------------------------------------------


def naive_policy_loss(
    logp,
    old,
    adv,
    mask,
    *,
    loss_type,
    clip_low,
    clip_high,
    dual_clip,
    ratio_level,
    ref=None,
    beta=0.0,
    kl_kind="k3",
    max_len=None,
    entropy=None,
    entropy_coef=0.0,
    token_weights=None,
):
    """One token at a time, straight from the formulas; scalar tensor ops so autograd gives the gradient."""
    b, t = logp.shape
    seq_losses, total, weight_sum = [], 0.0, 0.0
    for i in range(b):
        tokens = [j for j in range(t) if mask[i, j] != 0]
        if ratio_level == "sequence" and tokens:
            # GSPO: exp of the (mask-weighted) mean token log-ratio, one value for the whole sequence
            seq_ratio = torch.exp(
                sum(mask[i, j] * (logp[i, j] - old[i, j]) for j in tokens) / sum(mask[i, j] for j in tokens)
            )
        seq_sum, seq_w = 0.0, 0.0
        for j in tokens:
            a = adv[i]
            r = seq_ratio if ratio_level == "sequence" else torch.exp(logp[i, j] - old[i, j])
            loss = torch.maximum(-a * r, -a * torch.clamp(r, 1 - clip_low, 1 + clip_high))
            if dual_clip is not None and a < 0:
                loss = torch.minimum(loss, -a * dual_clip)
            if token_weights is not None:
                loss = loss * token_weights[i, j]
            if beta:
                d = ref[i, j] - logp[i, j]
                loss = loss + beta * {"k1": -d, "k2": 0.5 * d * d, "k3": torch.exp(d) - 1 - d}[kl_kind]
            if entropy_coef:
                loss = loss - entropy_coef * entropy[i, j]
            seq_sum = seq_sum + mask[i, j] * loss
            seq_w = seq_w + mask[i, j]
        if tokens:
            seq_losses.append(seq_sum / seq_w)
        total, weight_sum = total + seq_sum, weight_sum + seq_w
    if loss_type == "grpo":
        return sum(seq_losses) / len(seq_losses)
    if loss_type == "token_mean":
        return total / weight_sum
    return total / (b * (max_len or t))


def random_batch(seed, b=5, t=6):
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(b, t, generator=gen) * 3).requires_grad_()
    old = logp.detach() + torch.randn(b, t, generator=gen) * 0.4
    # sequence ratios: 0 ~ e^1.5 > dual clip 3 (A < 0); 1 ~ e^.4 above 1 + clip_high (A > 0);
    # 2 ~ e^-.4 below 1 - clip_low (A < 0); 4 ~ 1, inside the range. Token ratios scatter around these.
    old[0] -= 1.5
    old[1] -= 0.4
    old[2] += 0.4
    old[4] = logp.detach()[4] + torch.randn(t, generator=gen) * 0.05
    adv = torch.tensor([-1.0, 0.5, -0.7, 1.3, 0.3])
    mask = torch.ones(b, t)
    mask[1, 4:] = 0.0
    mask[2, 2] = 0.5  # a float weight
    mask[3] = 0.0  # a sequence with no tokens at all
    ref = logp.detach() + torch.randn(b, t, generator=gen) * 0.3
    entropy = torch.rand(b, t, generator=gen) * 2
    return logp, old, adv, mask, ref, entropy


# --- against the loop -------------------------------------------------------------------------


@pytest.mark.parametrize("loss_type", ["grpo", "token_mean", "dr_grpo"])
@pytest.mark.parametrize("ratio_level", ["token", "sequence"])
@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_policy_loss_matches_naive_loop(loss_type, ratio_level, dual_clip):
    logp, old, adv, mask, _, _ = random_batch(0)
    kwargs = dict(loss_type=loss_type, clip_low=0.2, clip_high=0.28, dual_clip=dual_clip, ratio_level=ratio_level)
    loss, stats = policy_loss(logp, old, adv, mask, LossSettings(max_len=8, **kwargs))
    (grad,) = torch.autograd.grad(loss, logp)
    expected = naive_policy_loss(logp, old, adv, mask, max_len=8, **kwargs)
    (expected_grad,) = torch.autograd.grad(expected, logp)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, expected_grad)
    assert (grad != 0).any()
    torch.testing.assert_close(stats["pg_loss"], expected.detach())
    # the inputs really exercise the branches being compared
    assert stats["clip_frac_low"] > 0 and stats["clip_frac_high"] > 0
    if dual_clip:
        assert stats["dual_clip_frac"] > 0


@pytest.mark.parametrize("kl_kind", ["k1", "k2", "k3"])
@pytest.mark.parametrize("loss_type", ["grpo", "token_mean", "dr_grpo"])
def test_kl_and_entropy_terms_match_naive_loop(kl_kind, loss_type):
    logp, old, adv, mask, ref, entropy = random_batch(1)
    kwargs = dict(
        loss_type=loss_type,
        clip_low=0.2,
        clip_high=0.2,
        dual_clip=None,
        ratio_level="token",
        beta=0.05,
        kl_kind=kl_kind,
        entropy_coef=0.01,
    )
    loss, stats = policy_loss(logp, old, adv, mask, LossSettings(**kwargs), ref_logp=ref, entropy=entropy)
    expected = naive_policy_loss(logp, old, adv, mask, ref=ref, entropy=entropy, **kwargs)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(torch.autograd.grad(loss, logp)[0], torch.autograd.grad(expected, logp)[0])
    assert stats["kl"] != 0 and stats["entropy"] > 0


# --- by hand ----------------------------------------------------------------------------------


def one_token(log_ratio, adv, **kwargs):
    logp = torch.zeros(1, 1, requires_grad=True)
    loss, stats = policy_loss(
        logp, torch.full((1, 1), -log_ratio), torch.tensor([adv]), torch.ones(1, 1), LossSettings(**kwargs)
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.item(), grad.item(), stats


def test_clipped_surrogate_by_hand():
    # A > 0, ratio e^0.5 = 1.65 > 1.2: clipped to 1.2, no gradient
    loss, grad, stats = one_token(0.5, 1.0)
    assert (loss, grad, stats["clip_frac"].item()) == (pytest.approx(-1.2), 0.0, 1.0)
    # A > 0, ratio 0.5 < 0.8: below the range but the unclipped term is the pessimistic one; d/dlogp = -A * r
    loss, grad, stats = one_token(math.log(0.5), 1.0)
    assert (loss, grad, stats["clip_frac"].item()) == (pytest.approx(-0.5), pytest.approx(-0.5), 0.0)
    # A < 0, ratio 0.5: clipped at 0.8
    loss, grad, _ = one_token(math.log(0.5), -1.0)
    assert (loss, grad) == (pytest.approx(0.8), 0.0)
    # clip-higher: ratio 1.25 is clipped with clip_high 0.2 but not with 0.28
    assert one_token(math.log(1.25), 1.0, clip_high=0.2)[1] == 0.0
    loss, grad, _ = one_token(math.log(1.25), 1.0, clip_high=0.28)
    assert (loss, grad) == (pytest.approx(-1.25), pytest.approx(-1.25))


def test_dual_clip_by_hand():
    # A = -1, ratio e^1.5 = 4.48: the plain clipped loss is 4.48 (and grows); dual clip caps it at 3
    loss, grad, _ = one_token(1.5, -1.0)
    assert (loss, grad) == (pytest.approx(math.exp(1.5)), pytest.approx(math.exp(1.5)))
    loss, grad, stats = one_token(1.5, -1.0, dual_clip=3.0)
    assert (loss, grad, stats["dual_clip_frac"].item()) == (pytest.approx(3.0), 0.0, 1.0)
    # dual clip never touches positive advantages
    assert one_token(1.5, 1.0, dual_clip=3.0)[0] == pytest.approx(-1.2)


def test_aggregations_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    agg = {k: a.reduce for k, a in LOSS_AGGREGATIONS.items()}
    assert agg[LossType.GRPO](values, mask, None).item() == pytest.approx((2.0 + 4.0) / 2)  # empty row skipped
    assert agg[LossType.TOKEN_MEAN](values, mask, None).item() == pytest.approx(10.0 / 4)
    assert agg[LossType.DR_GRPO](values, mask, 5).item() == pytest.approx(10.0 / (3 * 5))
    assert agg[LossType.DR_GRPO](values, mask, None).item() == pytest.approx(10.0 / (3 * 3))  # default T
    # what each divides by, so micro-batch losses add up: sequences with tokens, tokens, sequences
    units = {k: float(a.units(mask)) for k, a in LOSS_AGGREGATIONS.items()}
    assert units == {LossType.GRPO: 2.0, LossType.TOKEN_MEAN: 4.0, LossType.DR_GRPO: 3.0}
    # the same numbers through policy_loss: ratio 1 and per-token advantages -values give pg = values
    logp = torch.zeros(3, 3)
    loss, _ = policy_loss(logp, logp, -values, mask, LossSettings(loss_type="grpo"))
    assert loss.item() == pytest.approx(3.0)
    assert set(LOSS_AGGREGATIONS) == set(LossType) and set(LOG_RATIOS) == set(RatioLevel)


def test_sequence_ratio_is_the_geometric_mean():
    logp = torch.zeros(1, 3, requires_grad=True)
    old = torch.tensor([[-0.3, 0.3, -0.06]])  # token ratios e^.3, e^-.3, e^.06; mean log-ratio .02
    _, stats = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 3), LossSettings(ratio_level="sequence"))
    for key in ("ratio_min", "ratio_mean", "ratio_max"):
        assert stats[key].item() == pytest.approx(math.exp(0.02))


# --- gradients, edge cases, dtypes ----------------------------------------------------------


def test_clipped_and_masked_tokens_get_exactly_zero_gradient():
    logp, old, adv, mask, _, _ = random_batch(2)
    loss, _ = policy_loss(logp, old, adv, mask, LossSettings(loss_type="token_mean"))
    (grad,) = torch.autograd.grad(loss, logp)
    ratio = (logp - old).exp().detach()
    a = adv[:, None].expand_as(ratio)
    clipped = ((a > 0) & (ratio > 1.2)) | ((a < 0) & (ratio < 0.8))
    assert clipped.any() and (~clipped & (mask > 0)).any()
    assert (grad[clipped] == 0).all()
    assert (grad[mask == 0] == 0).all()
    assert (grad[~clipped & (mask > 0)] != 0).all()


@pytest.mark.parametrize("loss_type", ["grpo", "token_mean", "dr_grpo"])
@pytest.mark.parametrize("ratio_level", ["token", "sequence"])
def test_all_masked_batch_gives_finite_zero(loss_type, ratio_level):
    logp = torch.randn(2, 4, requires_grad=True)
    old = torch.full((2, 4), float("-inf"))  # padding values must not matter
    ref = torch.full((2, 4), float("inf"))
    settings = LossSettings(loss_type=loss_type, ratio_level=ratio_level, beta=0.1, dual_clip=3.0, entropy_coef=0.01)
    loss, stats = policy_loss(
        logp, old, torch.tensor([1.0, -1.0]), torch.zeros(2, 4), settings, ref_logp=ref, entropy=torch.ones(2, 4)
    )
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert (logp.grad == 0).all()
    assert all(torch.isfinite(v) for v in stats.values())


@pytest.mark.parametrize("ratio_level", ["token", "sequence"])
def test_padding_values_never_leak(ratio_level):
    logp, old, adv, mask, ref, _ = random_batch(3)
    dirty_old = torch.where(mask > 0, old, torch.full_like(old, float("-inf")))
    dirty_ref = torch.where(mask > 0, ref, torch.full_like(ref, 1e30))
    clean, _ = policy_loss(logp, old, adv, mask, LossSettings(beta=0.1, ratio_level=ratio_level), ref_logp=ref)
    dirty, _ = policy_loss(
        logp, dirty_old, adv, mask, LossSettings(beta=0.1, ratio_level=ratio_level), ref_logp=dirty_ref
    )
    torch.testing.assert_close(dirty, clean)
    torch.testing.assert_close(torch.autograd.grad(dirty, logp)[0], torch.autograd.grad(clean, logp)[0])


def test_bf16_inputs_give_fp32_results():
    logp, old, adv, mask, ref, _ = random_batch(4)
    logp16 = logp.detach().bfloat16().requires_grad_()
    loss, stats = policy_loss(
        logp16, old.bfloat16(), adv.bfloat16(), mask, LossSettings(beta=0.1), ref_logp=ref.bfloat16()
    )
    assert loss.dtype == torch.float32 and all(v.dtype == torch.float32 for v in stats.values())
    expected, _ = policy_loss(
        logp16.float(),
        old.bfloat16().float(),
        adv.bfloat16().float(),
        mask,
        LossSettings(beta=0.1),
        ref_logp=ref.bfloat16().float(),
    )
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert logp16.grad.dtype == torch.bfloat16 and torch.isfinite(logp16.grad).all()


def test_huge_log_ratios_stay_finite():
    logp = torch.tensor([[0.0, -60.0]], dtype=torch.bfloat16, requires_grad=True)
    old = torch.tensor([[-60.0, 0.0]], dtype=torch.bfloat16)
    loss, stats = policy_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 2), LossSettings(beta=1.0), ref_logp=old)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert stats["ratio_max"].item() == pytest.approx(math.exp(20.0), rel=1e-6)


def test_policy_loss_errors_name_the_fix():
    logp, old, adv, mask, _, _ = random_batch(5)
    with pytest.raises(ValueError, match="'grpo', 'token_mean', 'dr_grpo'"):
        policy_loss(logp, old, adv, mask, LossSettings(loss_type="seq_mean"))
    with pytest.raises(ValueError, match="algo.beta=0"):
        policy_loss(logp, old, adv, mask, LossSettings(beta=0.1))
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        policy_loss(logp, old, adv, mask, LossSettings(dual_clip=0.5))
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(logp, old, adv, mask, LossSettings(entropy_coef=0.01))
    with pytest.raises(ValueError, match="mask has shape"):
        policy_loss(logp, old, adv, mask[:, :3])
    with pytest.raises(ValueError, match="advantages have shape"):
        policy_loss(logp, old, adv[:3], mask)


# --- token_logprobs ---------------------------------------------------------------------------


def reference_logprobs(logits, targets):
    log_p = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    return log_p.gather(-1, targets[..., None]).squeeze(-1), -(log_p.exp() * log_p).sum(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_token_logprobs_match_log_softmax(dtype):
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 11, generator=gen) * 3).to(dtype).requires_grad_()
    targets = torch.randint(0, 11, (3, 5), generator=gen)
    logp, entropy = token_logprobs(logits, targets, chunk_size=4)  # 15 rows: 4 chunks, the last partial
    ref_logp, ref_entropy = reference_logprobs(logits, targets)
    assert logp.dtype == entropy.dtype == torch.float32
    torch.testing.assert_close(logp, ref_logp)
    torch.testing.assert_close(entropy, ref_entropy)
    w1, w2 = torch.randn(3, 5, generator=gen), torch.randn(3, 5, generator=gen)
    (grad,) = torch.autograd.grad((logp * w1 + entropy * w2).sum(), logits)
    (ref_grad,) = torch.autograd.grad((ref_logp * w1 + ref_entropy * w2).sum(), logits)
    assert grad.dtype == dtype
    torch.testing.assert_close(grad, ref_grad)
    with torch.no_grad():
        torch.testing.assert_close(token_logprobs(logits, targets)[0], ref_logp)


def test_token_logprobs_handles_masked_vocabulary_and_padding_targets():
    logits = torch.tensor([[[0.0, 0.0, float("-inf"), float("-inf")], [1.0, 2.0, 3.0, 4.0]]], requires_grad=True)
    targets = torch.tensor([[1, -100]])
    logp, entropy = token_logprobs(logits, targets)
    assert logp[0, 0].item() == pytest.approx(math.log(0.5))
    assert entropy[0, 0].item() == pytest.approx(math.log(2))  # two equally likely tokens
    assert logp[0, 1].item() == 0.0
    (logp.sum() + entropy.sum()).backward()
    assert torch.isfinite(logits.grad).all()


def test_token_logprobs_saves_no_full_fp32_copy_for_backward():
    # With chunking + checkpointing, nothing of size B*T*V in fp32 is kept for backward.
    logits = torch.randn(4, 8, 64, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, 64, (4, 8))
    saved = []

    def pack(t):
        saved.append((t.dtype, t.numel()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        token_logprobs(logits, targets, chunk_size=8)
    fp32_saved = sum(n for dtype, n in saved if dtype == torch.float32)
    assert fp32_saved < logits.numel()


# --- rollout correction ------------------------------------------------------------------------


def test_rollout_is_weights_by_hand():
    from rlvr.algos import logprob_mismatch, rollout_is_weights

    ln2 = math.log(2.0)
    old = torch.tensor([[0.0, ln2, 5.0]])  # the trainer's log-probs; the last position is padding
    behaviour = torch.tensor([[ln2, 0.0, -5.0]])  # the engine's
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    w, stats = rollout_is_weights(old, behaviour, mask, level="token", cap=1.5)
    torch.testing.assert_close(w, torch.tensor([[0.5, 1.5, 1.0]]))  # ratios 1/2 and 2, the 2 truncated; padding 1
    assert stats == pytest.approx({"is_weight_mean": 1.25, "is_truncated_frac": 0.5})
    w, stats = rollout_is_weights(old, behaviour, mask, level="sequence", cap=1.5)
    torch.testing.assert_close(w, torch.ones(1, 3))  # log ratios -ln2 + ln2 = 0: the sequence weighs 1
    w, _ = rollout_is_weights(old, behaviour + torch.tensor([[0.0, -ln2, 0.0]]), mask, level="sequence", cap=5.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 2.0, 1.0]]))  # product of the token ratios 1/2 * 4
    assert rollout_is_weights(old, behaviour, mask, level="none", cap=2.0) == (None, {})
    m = logprob_mismatch(old, behaviour, mask)
    k3 = (math.exp(-ln2) - 1 + ln2 + math.exp(ln2) - 1 - ln2) / 2
    assert m == pytest.approx(
        {"logprob_diff_mean": ln2, "logprob_diff_p99": ln2, "logprob_diff_max": ln2, "engine_kl": k3}
    )


def test_is_weights_scale_each_tokens_policy_gradient_term():
    logp, old, adv, mask, _, _ = random_batch(3)
    weights = torch.rand(logp.shape, generator=torch.Generator().manual_seed(4)) + 0.5
    settings = LossSettings(loss_type="token_mean", clip_low=0.2, clip_high=0.28)
    loss, _ = policy_loss(logp, old, adv, mask, settings, is_weights=weights)
    expected = naive_policy_loss(
        logp,
        old,
        adv,
        mask,
        loss_type="token_mean",
        clip_low=0.2,
        clip_high=0.28,
        dual_clip=None,
        ratio_level="token",
        token_weights=weights,
    )
    torch.testing.assert_close(loss, expected)
    plain, _ = policy_loss(logp, old, adv, mask, settings)
    assert not torch.allclose(loss, plain)
