"""rlvr.algos: advantages, KL estimators, reward shaping, registry lookups.

Each function is checked against values worked out by hand and against a
plain Python loop over samples on random inputs. Losses and log-probs are in
test_algos_losses.py.
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from rlvr.config.algo import AlgoConfig
from rlvr.configlib import ConfigError, from_dict
from rlvr.algos import (
    advantage_scale,
    decoupled_advantages,
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    AdvantageEstimator,
    AdvantageScale,
    KLEstimator,
    group_advantages,
    kl_estimate,
    kl_reward_penalty,
    fill_invalid,
    lookup,
    overlong_penalty,
    registered,
    turn_advantages,
    zero_variance_groups,
)

# --- advantages ----------------------------------------------------------------------------


def test_grpo_advantages_by_hand():
    # group 1: mean .25, Bessel std sqrt((.75^2 + 3 * .25^2) / 3) = .5; group 2: mean 2, std 1
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 2.0])
    adv = group_advantages(rewards, 4, eps=0.0)
    s = math.sqrt(2 / 3)
    expected = torch.tensor([1.5, -0.5, -0.5, -0.5, -1 / s, 0.0, 1 / s, 0.0])
    torch.testing.assert_close(adv, expected)
    # scale="none" is plain centring (Dr. GRPO)
    torch.testing.assert_close(
        group_advantages(rewards, 4, scale="none"), torch.tensor([0.75, -0.25, -0.25, -0.25, -1.0, 0.0, 1.0, 0.0])
    )


def test_rloo_advantages_by_hand():
    # baseline for the 1 is the mean of three 0s; for each 0 it is (1 + 0 + 0) / 3
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, estimator="rloo", scale="none")
    torch.testing.assert_close(adv, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))
    # the Enum member selects the same function as its string
    adv_enum = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, estimator=AdvantageEstimator.RLOO, scale="none")
    torch.testing.assert_close(adv_enum, adv)


def naive_advantages(rewards: list[float], g: int, estimator: str, scale: str, eps: float) -> list[float]:
    out = []
    batch_std = statistics.stdev(rewards) if len(rewards) > 1 else 0.0
    for start in range(0, len(rewards), g):
        group = rewards[start : start + g]
        std = statistics.stdev(group) if g > 1 else 0.0
        for i, r in enumerate(group):
            if max(group) == min(group):
                out.append(0.0)
                continue
            others = group[:i] + group[i + 1 :]
            baseline = statistics.fmean(group) if estimator == "grpo" else statistics.fmean(others)
            denom = {"group": std + eps, "batch": batch_std + eps, "none": 1.0}[scale]
            out.append((r - baseline) / denom)
    return out


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("g", [2, 5])
def test_advantages_match_naive_loop(estimator, scale, g):
    gen = torch.Generator().manual_seed(g)
    rewards = torch.randint(0, 3, (6 * g,), generator=gen).float() / 2  # ties and flat groups both occur
    rewards[:g] = 0.5  # at least one flat group
    expected = naive_advantages(rewards.tolist(), g, estimator, scale, 1e-6)
    torch.testing.assert_close(
        group_advantages(rewards, g, estimator=estimator, scale=scale), torch.tensor(expected), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_the_advantage_scale_is_the_naive_loops_denominator(scale):
    """What per-turn credit divides a turn's earlier rewards by (rlvr.train.trajectories)."""
    gen, g = torch.Generator().manual_seed(5), 3
    rewards = torch.randint(0, 4, (4 * g,), generator=gen).float() / 3  # (N,)
    expected = []
    for start in range(0, len(rewards), g):
        group = rewards[start : start + g].tolist()
        std = {"group": statistics.stdev(group), "batch": statistics.stdev(rewards.tolist()), "none": None}[scale]
        expected += [1.0 if std is None else std + 1e-6] * g
    torch.testing.assert_close(advantage_scale(rewards, g, scale, 1e-6), torch.tensor(expected), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_decoupled_advantages_match_the_naive_loop_per_part(estimator, scale):
    """Each part's advantage on its own, weighted; unscaled it is the advantage of the summed reward."""
    gen, g = torch.Generator().manual_seed(3), 4
    rule = torch.randint(0, 2, (5 * g,), generator=gen).float()  # (N,)
    rule[:g] = 0.0  # a group the verifier does not tell apart
    learned = torch.rand(5 * g, generator=gen) * 0.05  # (N,) small variation everywhere
    adv = decoupled_advantages(rule, {"rm": (0.3, learned)}, g, estimator=estimator, scale=scale)
    expected = [
        a + 0.3 * b
        for a, b in zip(
            naive_advantages(rule.tolist(), g, estimator, scale, 1e-6),
            naive_advantages(learned.tolist(), g, estimator, scale, 1e-6),
        )
    ]
    torch.testing.assert_close(adv, torch.tensor(expected), rtol=1e-5, atol=1e-5)
    if scale == "none":
        torch.testing.assert_close(adv, group_advantages(rule + 0.3 * learned, g, estimator=estimator, scale=scale))


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_zero_variance_groups_give_exact_zeros(estimator, scale, eps):
    # 0.1 is not exact in binary: the float mean of a flat group need not equal its members,
    # so without the explicit rule eps=0 would give 0/0 = NaN or residue/0 = inf.
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.7, 0.7, 1.0, 0.0, 0.0])
    adv = group_advantages(rewards, 3, estimator=estimator, scale=scale, eps=eps)
    assert torch.isfinite(adv).all()
    assert (adv[:6] == 0).all()
    assert (adv[6:] != 0).all()
    assert zero_variance_groups(rewards, 3).tolist() == [True, True, False]


def test_all_groups_flat_batch_scale_is_zero_not_nan():
    adv = group_advantages(torch.ones(8), 4, scale="batch", eps=0.0)
    assert (adv == 0).all()


def test_group_size_one():
    assert (group_advantages(torch.tensor([0.0, 1.0, 2.0]), 1) == 0).all()
    with pytest.raises(ValueError, match="group_size >= 2"):
        group_advantages(torch.tensor([0.0, 1.0]), 1, estimator="rloo")


def test_noise_is_seeded_and_never_touches_flat_groups():
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0])  # flat group, then a 2-way tie
    plain = group_advantages(rewards, 4)
    a = group_advantages(rewards, 4, noise_std=0.01, generator=torch.Generator().manual_seed(0))
    b = group_advantages(rewards, 4, noise_std=0.01, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(a, b)
    assert (a[:4] == 0).all()
    assert not torch.equal(a[4:], plain[4:])  # ties are broken ...
    torch.testing.assert_close(a[4:], plain[4:], atol=0.1, rtol=0)  # ... but only slightly
    assert (a[4:].sign() == plain[4:].sign()).all()


def test_advantages_are_fp32_for_half_precision_rewards():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25], dtype=torch.bfloat16)
    adv = group_advantages(rewards, 4)
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv, group_advantages(rewards.float(), 4))


def test_advantage_errors_name_the_problem():
    with pytest.raises(ValueError, match="group_size=4"):
        group_advantages(torch.zeros(6), 4)
    with pytest.raises(ValueError, match="'grpo', 'rloo'"):
        group_advantages(torch.zeros(4), 4, estimator="ppo")
    with pytest.raises(ValueError, match="'group', 'batch', 'none'"):
        group_advantages(torch.zeros(4), 4, scale="token")
    with pytest.raises(ValueError, match=r"indices \[2\]"):
        group_advantages(torch.tensor([0.0, 1.0, float("nan"), 0.0]), 2)


def test_every_enum_member_is_registered():
    assert set(ADVANTAGE_ESTIMATORS) == set(AdvantageEstimator)
    assert set(KL_ESTIMATORS) == set(KLEstimator)
    assert lookup(KL_ESTIMATORS, KLEstimator, "k2", "x") is KL_ESTIMATORS[KLEstimator.K2]
    with pytest.raises(ValueError, match="unknown algo.kl_estimator 'k4'"):
        kl_estimate(torch.zeros(1, 1), torch.zeros(1, 1), "k4")
    assert [s.value for s in AdvantageScale] == ["group", "batch", "none"]
    with pytest.raises(TypeError, match=r"KLEstimator names \['k2', 'k3'\] without an implementation"):
        registered(KLEstimator, {KLEstimator.K1: KL_ESTIMATORS[KLEstimator.K1]})
    # the config's key is the Enum: its name prints as written, and a wrong one is refused naming the key
    algo = from_dict(AlgoConfig, {"kl_estimator": "k2"}, prefix="algo")
    assert algo.kl_estimator is KLEstimator.K2 and f"{algo.kl_estimator}" == "k2"
    with pytest.raises(ConfigError, match="algo.kl_estimator: expected one of 'k1', 'k2', 'k3', got 'k4'"):
        from_dict(AlgoConfig, {"kl_estimator": "k4"}, prefix="algo")


def test_invalid_rewards_take_their_groups_valid_mean_as_a_plain_loop_gives():
    rewards = torch.tensor([1.0, 9.0, 0.0, 2.0, 5.0, 7.0, 3.0, 3.0])
    valid = torch.tensor([True, False, True, True, False, False, False, False])
    expected = []
    for m in range(2):
        group = list(zip(rewards[m * 4 : (m + 1) * 4].tolist(), valid[m * 4 : (m + 1) * 4].tolist()))
        kept = [r for r, ok in group if ok]
        mean = sum(kept) / len(kept) if kept else 0.0  # a group with no valid reward: 0
        expected += [r if ok else mean for r, ok in group]
    assert fill_invalid(rewards, valid, 4).tolist() == pytest.approx(expected)
    assert fill_invalid(rewards, valid, 4)[1] == 1.0


def test_turn_credit_subtracts_the_scaled_reward_of_the_turns_before():
    assert turn_advantages(1.0, [0.5, 0.25, 2.0], 0.5) == [1.0, 0.0, -0.5]
    assert turn_advantages(-0.3, [1.0, 1.0], None) == [-0.3, -0.3]  # no credit of their own: every turn keeps A


# --- KL -----------------------------------------------------------------------------------


def test_kl_estimators_by_hand():
    # policy 0.5, reference 0.25: log(q/p) = -log 2
    logp = torch.full((1, 1), math.log(0.5))
    ref = torch.full((1, 1), math.log(0.25))
    ln2 = math.log(2)
    assert kl_estimate(logp, ref, "k1").item() == pytest.approx(ln2)
    assert kl_estimate(logp, ref, "k2").item() == pytest.approx(0.5 * ln2**2)
    assert kl_estimate(logp, ref, "k3").item() == pytest.approx(0.5 - 1 + ln2)


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_kl_matches_naive_loop(kind):
    gen = torch.Generator().manual_seed(1)
    logp = -torch.rand(3, 5, generator=gen) * 4
    ref = -torch.rand(3, 5, generator=gen) * 4
    formulas = {"k1": lambda d: -d, "k2": lambda d: 0.5 * d * d, "k3": lambda d: math.exp(d) - 1 - d}
    expected = [
        [formulas[kind](r - p) for p, r in zip(lp_row, ref_row)] for lp_row, ref_row in zip(logp.tolist(), ref.tolist())
    ]
    torch.testing.assert_close(kl_estimate(logp, ref, kind), torch.tensor(expected))


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_unbiased_estimators_average_to_the_exact_kl(kind):
    # E_{y~p}[k(y)] = KL(p || q) exactly for k1 and k3: this pins the direction of the ratio.
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.2, 0.5, 0.3])
    exact = (p * (p / q).log()).sum()
    per_outcome = kl_estimate(p.log()[None], q.log()[None], kind)[0]  # (3,)
    torch.testing.assert_close((p * per_outcome).sum(), exact)


def test_kl_is_fp32_and_finite_for_extreme_half_precision_inputs():
    logp = torch.tensor([[-80.0, -0.01, 0.0]], dtype=torch.bfloat16)
    ref = torch.tensor([[0.0, -90.0, 0.0]], dtype=torch.bfloat16)
    kl = kl_estimate(logp, ref, "k3")
    assert kl.dtype == torch.float32
    assert torch.isfinite(kl).all()
    # the log-ratio is clamped to +-20 before exp
    assert kl[0, 0].item() == pytest.approx(math.expm1(20.0) - 20.0, rel=1e-6)
    assert kl[0, 1].item() == pytest.approx(math.expm1(-20.0) + 20.0, rel=1e-6)
    assert kl[0, 2].item() == 0.0


def test_kl_reward_penalty_sums_masked_tokens_without_gradient():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0, float("-inf")], [-2.0, -1.0, -1.0]])  # -inf only under the mask
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    penalty = kl_reward_penalty(logp, ref, mask, beta=0.1, kind="k1")
    torch.testing.assert_close(penalty, torch.tensor([0.1 * 0.5, 0.1 * 1.0]))
    assert not penalty.requires_grad


# --- overlong shaping ---------------------------------------------------------------------


def test_overlong_penalty_by_hand():
    # max 20, buffer 8: free up to 12 tokens, then -1/8 per token, -1 from 20 on
    lengths = torch.tensor([0, 12, 13, 16, 20, 25])
    out = overlong_penalty(lengths, max_len=20, buffer=8)
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, -0.125, -0.5, -1.0, -1.0]))
    assert out.dtype == torch.float32
    torch.testing.assert_close(overlong_penalty(lengths, 20, 8, penalty=0.5), out * 0.5)


def test_overlong_penalty_rejects_bad_buffer():
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(torch.tensor([1]), max_len=10, buffer=0)
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(torch.tensor([1]), max_len=10, buffer=11)
