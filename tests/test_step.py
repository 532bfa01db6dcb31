"""collect_batch: dynamic sampling, length handling, KL in the reward, on a real tiny model.

The verifier is replaced by a scripted one so that which groups carry signal
is known in advance: problem i has reward variance iff i % 3 == 0.
"""

import math

import pytest
import torch

from rlvr.algos import group_advantages, kl_estimate
from rlvr.config import AlgoConfig
from rlvr.models.tiny import build_tiny_model, build_tokenizer
from rlvr.records import Problem, RewardResult
from helpers import update_settings

from rlvr.rollout import HFEngine, SamplingParams
from rlvr.algos import fill_invalid
from rlvr.train.step import collect_batch, next_round_size
from rlvr.train.update import policy_update

G = 3


class Sampler:
    def __init__(self):
        self.position = 0

    def take(self, n):
        out = [
            Problem(id=f"p{i}", prompt=f"{i % 90 + 10}+{i % 7}=", answer="0")
            for i in range(self.position, self.position + n)
        ]
        self.position += n
        return out


class ScriptedReward:
    """Problem i: rewards (1, 0, 0, ...) when i % signal_every == 0, else all equal (0.5)."""

    def __init__(self, signal_every=3, invalid=()):
        self.signal_every, self.invalid = signal_every, set(invalid)

    def score(self, problems, texts, group_ids=None):
        out = []
        for j, p in enumerate(problems):
            i, index = int(p.id[1:]), j % G
            if (i, index) in self.invalid:
                out.append(RewardResult.invalid("scripted"))
            elif self.signal_every and i % self.signal_every == 0:
                out.append(RewardResult(total=1.0 if index == 0 else 0.0))
            else:
                out.append(RewardResult(total=0.5))
        return out


@pytest.fixture(scope="module")
def tiny():
    tok = build_tokenizer()
    return build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=0), tok


def collect(tiny, algo, reward=None, batch_size=4, max_new_tokens=8, ref=None):
    model, tok = tiny
    torch.manual_seed(0)
    params = SamplingParams(group_size=G, max_new_tokens=max_new_tokens)
    return collect_batch(
        HFEngine(model, tok), Sampler(), reward or ScriptedReward(), params, algo, batch_size=batch_size, ref=ref
    )


def problem_numbers(batch):
    return sorted({int(p.id[1:]) for p in batch.problems})


def test_dynamic_sampling_keeps_only_groups_with_signal(tiny):
    batch = collect(tiny, AlgoConfig(filter_zero_std=True, max_extra_rounds=10))
    # round 0: p0..p3 -> keeps p0, p3; round 1 (keep rate 2/4): 4 prompts p4..p7 -> keeps p6;
    # round 2 (keep rate 3/8): ceil(1 * 8 / 3) = 3 prompts p8..p10 -> keeps p9
    assert problem_numbers(batch) == [0, 3, 6, 9]
    m = batch.metrics
    assert m["rollout/extra_rounds"] == 2 and m["rollout/groups"] == 11 and m["rollout/dropped_groups"] == 7
    assert m["rollout/shortfall_groups"] == 0
    assert m["rollout/zero_std_frac"] == pytest.approx(7 / 11)  # before filtering, over every group sampled
    assert m["actor/zero_std_groups_in_update"] == 0
    grouped = batch.rewards.view(-1, G)
    assert (grouped.amax(1) > grouped.amin(1)).all()
    assert len({c.group_id for c in batch.completions}) == 4  # unique group ids across rounds
    assert batch.advantages.abs().view(-1, G).sum(1).gt(0).all()


def test_without_the_filter_the_metric_counts_zero_variance_groups(tiny):
    batch = collect(tiny, AlgoConfig(filter_zero_std=False))
    assert problem_numbers(batch) == [0, 1, 2, 3]
    assert batch.metrics["actor/zero_std_groups_in_update"] == 2  # p1 and p2
    assert batch.metrics["rollout/extra_rounds"] == 0 and batch.metrics["rollout/zero_std_frac"] == 0.5


def test_shortfall_is_bounded_reported_and_an_empty_batch_changes_nothing(tiny):
    batch = collect(tiny, AlgoConfig(filter_zero_std=True, max_extra_rounds=2), ScriptedReward(signal_every=0))
    m = batch.metrics
    assert m["rollout/extra_rounds"] == 2 and m["rollout/groups"] == 12  # 3 rounds of a full batch each
    assert m["rollout/shortfall_groups"] == 4 and m["rollout/zero_std_frac"] == 1.0
    assert batch.completions == [] and batch.advantages.numel() == 0
    model, tok = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    out = policy_update(
        model,
        opt,
        batch.completions,
        batch.advantages,
        batch.loss_mask,
        None,
        tok.pad_token_id,
        _settings(),
        generator=torch.Generator().manual_seed(0),
    )
    assert out == {"actor/skipped_updates": 0.0}
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_partial_shortfall_trains_on_the_groups_it_found(tiny):
    batch = collect(tiny, AlgoConfig(filter_zero_std=True, max_extra_rounds=0))
    assert problem_numbers(batch) == [0, 3]
    assert batch.metrics["rollout/shortfall_groups"] == 2 and batch.metrics["actor/zero_std_groups_in_update"] == 0


def test_invalid_samples_are_masked_and_a_group_left_flat_by_them_is_dropped(tiny):
    # p0: index 0 (the only reward 1) invalid -> the valid rewards are all 0 -> no signal
    # p3: index 1 invalid -> still (1, ?, 0) with signal; the invalid one takes the valid mean 0.5
    reward = ScriptedReward(invalid={(0, 0), (3, 1)})
    batch = collect(tiny, AlgoConfig(filter_zero_std=True, max_extra_rounds=10), reward)
    assert problem_numbers(batch) == [3, 6, 9, 12]
    row = 0  # p3 is the first group
    assert batch.valid[row : row + G].tolist() == [True, False, True]
    assert batch.loss_mask[row : row + G].tolist() == [1.0, 0.0, 1.0]
    assert batch.shaped_rewards[row : row + G].tolist() == [1.0, 0.5, 0.0]
    assert batch.metrics["reward/invalid_frac"] > 0


def test_overlong_penalty_by_hand_and_it_counts_as_signal(tiny):
    algo = AlgoConfig(filter_zero_std=True, overlong_buffer=4, overlong_penalty=2.0)
    batch = collect(tiny, algo, ScriptedReward(signal_every=0), max_new_tokens=8)
    lengths = [len(c.token_ids) for c in batch.completions]
    # 0 up to 8 - 4 = 4 tokens, then -2 * (L - 4) / 4
    expected = [0.5 - 2.0 * min(max(n - 4, 0), 4) / 4 for n in lengths]
    assert batch.shaped_rewards.tolist() == pytest.approx(expected)
    # every verifier reward is flat (0.5): only groups whose lengths differ inside the buffer are kept
    for grp in range(len(batch.completions) // G):
        assert len(set(expected[grp * G : (grp + 1) * G])) > 1
    assert batch.metrics["actor/zero_std_groups_in_update"] == 0
    assert batch.metrics["reward/overlong_penalty_mean"] == pytest.approx(sum(expected) / len(expected) - 0.5)


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_truncated_completions_leave_the_loss_only_when_asked(tiny, mask_truncated):
    batch = collect(tiny, AlgoConfig(mask_truncated=mask_truncated), max_new_tokens=4)
    truncated = [c.finish_reason == "length" for c in batch.completions]
    assert 0 < sum(truncated) < len(truncated)  # an untrained model sometimes stops within 4 tokens
    expected = [float(not (t and mask_truncated)) for t in truncated]
    assert batch.loss_mask.tolist() == expected
    frac = sum(truncated) / len(truncated) if mask_truncated else 0.0
    assert batch.metrics["rollout/masked_truncated_frac"] == pytest.approx(frac)


class ShiftedReference:
    """Reference log-probs = behaviour log-probs - per-sequence shift; records what it was asked."""

    def __init__(self):
        self.seen = []

    def logprobs(self, completions):
        self.seen = [c.group_id for c in completions]
        t = max(len(c.token_ids) for c in completions)
        out = torch.zeros(len(completions), t)
        for i, c in enumerate(completions):
            out[i, : len(c.logprobs)] = torch.tensor(c.logprobs) - 0.1 * (1 + i % G)
        return out


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_kl_in_reward_by_hand(tiny, kind):
    ref = ShiftedReference()
    algo = AlgoConfig(filter_zero_std=True, kl_in_reward=True, beta=0.5, kl_estimator=kind, max_extra_rounds=10)
    batch = collect(tiny, algo, ref=ref)
    # the reference scores only the groups that were kept, and its log-probs come back for the loss
    assert ref.seen == [c.group_id for c in batch.completions]
    assert batch.ref_logp.shape[0] == len(batch.completions)
    per_token = {"k1": lambda d: d, "k2": lambda d: 0.5 * d * d, "k3": lambda d: math.exp(-d) - 1 + d}[kind]
    penalty = [0.5 * len(c.token_ids) * per_token(0.1 * (1 + i % G)) for i, c in enumerate(batch.completions)]
    assert batch.shaped_rewards.tolist() == pytest.approx((batch.rewards - torch.tensor(penalty)).tolist(), rel=1e-4)
    assert torch.allclose(batch.advantages, group_advantages(batch.shaped_rewards, G))
    assert batch.metrics["reward/kl_penalty_mean"] == pytest.approx(sum(penalty) / len(penalty), rel=1e-4)
    # the same estimator as the loss uses
    d = torch.tensor([[0.0, 0.0]]), torch.tensor([[-0.1, -0.1]])
    assert float(kl_estimate(*d, kind).sum()) == pytest.approx(2 * per_token(0.1), rel=1e-4)


def test_kl_as_a_loss_term_leaves_the_reward_alone(tiny):
    batch = collect(tiny, AlgoConfig(beta=0.5), ref=ShiftedReference())
    assert torch.equal(batch.shaped_rewards, fill_invalid(batch.rewards, batch.valid, G))
    assert batch.ref_logp is not None and batch.metrics["reward/kl_penalty_mean"] == 0.0


def test_reward_noise_breaks_ties_but_never_moves_flat_groups(tiny):
    plain = collect(tiny, AlgoConfig())
    noisy = collect(tiny, AlgoConfig(noise_std=0.1))
    assert torch.equal(plain.rewards, noisy.rewards)
    flat = plain.rewards.view(-1, G).amax(1) == plain.rewards.view(-1, G).amin(1)
    assert (noisy.advantages.view(-1, G)[flat] == 0).all()
    assert not torch.allclose(noisy.advantages.view(-1, G)[~flat], plain.advantages.view(-1, G)[~flat])


def test_a_learned_component_moves_the_advantage_by_its_weight_in_every_group(tiny):
    """The measured failure (docs/benchmarks.md, Learned rewards: correctness 22.3% -> 3.3%) at the
    defaults: in a group whose verifier reward is constant the learned component varied alone, and the
    group's std scaled it to the full advantage whatever its weight. Now its advantage is its own,
    weighted: at most 0.3 standard units there, and the verifier's still decides where it varies."""
    from rlvr.inference.reward_models import LearnedReward

    class Marker:  # a saturated reward model: tiny differences between completions
        cfg = type("Cfg", (), {"weight": 0.3, "normalize": "none"})()

        def score(self, problems, texts):
            return [0.5 + 0.01 * (j % G) for j in range(len(texts))]

    batch = collect(tiny, AlgoConfig(), LearnedReward(ScriptedReward(), {"marker": Marker()}))
    adv = batch.advantages.view(-1, G)  # p0 and p3 tell completions apart, p1 and p2 do not
    for flat in (1, 2):
        assert adv[flat].tolist() == pytest.approx([-0.3, 0.0, 0.3], abs=1e-3)
    for signal in (0, 3):
        assert adv[signal].tolist() == pytest.approx([1.1547 - 0.3, -0.5774, -0.5774 + 0.3], abs=1e-3)
    coupled = group_advantages(batch.shaped_rewards, G).view(-1, G)  # the old way: full scale in flat groups
    assert coupled[1].tolist() == pytest.approx([-1.0, 0.0, 1.0], abs=1e-3)


def test_next_round_size():
    assert next_round_size(need=4, kept=0, seen=4, batch_size=4) == 4  # nothing kept yet: a full batch
    assert next_round_size(need=2, kept=2, seen=8, batch_size=16) == 8  # keep rate 1/4
    assert next_round_size(need=2, kept=2, seen=100, batch_size=16) == 16  # at most one batch per round
    assert next_round_size(need=3, kept=5, seen=5, batch_size=16) == 3  # at least what is missing


def _settings(**kw):
    return update_settings(**kw)


class _SpeculatingEngine:
    """A stand-in for the vLLM engine's speculation bookkeeping (acceptance per call, the fallback)."""

    def __init__(self, rates):
        self.rates, self.speculative_stats, self.fallbacks = list(rates), {}, 0

    def next_call(self):
        self.speculative_stats = {"accept_rate": self.rates.pop(0), "accept_len": 1.5}

    def without_speculation(self):
        self.fallbacks += 1
        self.speculative_stats = {}


class _Log:
    def __init__(self):
        self.events = []

    def event(self, kind, **data):
        self.events.append({"kind": kind, **data})


def test_speculation_falls_back_after_patience_steps_of_low_acceptance():
    from rlvr.config import SpeculativeConfig
    from rlvr.train.step import LocalBatches, StepBatch

    engine, log = _SpeculatingEngine([0.1, 0.5, 0.1, 0.2, 0.1, 0.9]), _Log()
    spec = SpeculativeConfig(method="ngram", min_accept=0.3, patience=3)
    source = LocalBatches(engine, None, None, SamplingParams(), AlgoConfig(), 4, speculative=spec, log=log)
    seen = []
    for step in range(1, 7):
        engine.next_call()
        batch = StepBatch([], [], [], *(torch.zeros(0) for _ in range(5)))
        if source.speculative is not None:  # as collect() does
            source._watch_speculation(batch, step)
        seen.append(batch.metrics.get("rollout/spec_accept_rate"))
    assert seen == [0.1, 0.5, 0.1, 0.2, 0.1, None]  # steps 3-5 under 0.3: plain decoding from step 6 on
    assert engine.fallbacks == 1 and source.speculative is None  # 0.5 at step 2 reset the count
    assert log.events == [
        {"kind": "speculative_fallback", "step": 5, "accept_rate": 0.1, "min_accept": 0.3, "steps": 3}
    ]
