"""rlvr's decode loop agrees with transformers' generate, samples the right distribution, and
its behaviour log-probs match re-scoring; the update's zero-gradient skip changes no weight."""

import math

import pytest
import torch

from rlvr.scoring import completion_logprobs
from rlvr.records import Problem
from rlvr.algos.truncation import SIZE_BITS, Truncation
from rlvr.rollout.decode import decode
from helpers import sample, update_settings

from rlvr.rollout import LoopEngine, SamplingParams, render_prompt
from rlvr.train.update import policy_update
from test_models import one_thread, save_tiny  # noqa: F401  (one_thread: autouse fixture)

PROBLEMS = [
    Problem(id="a", prompt=[{"role": "user", "content": "12+3="}]),
    Problem(id="b", prompt="4+5="),
    Problem(id="c", prompt=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "7*8="}]),
]


@pytest.fixture
def tiny(tmp_path):
    save_tiny(tmp_path, pad=False)  # pad falls back to eos, as for many real checkpoints
    from rlvr.models import load_model

    model, tok = load_model(tmp_path)
    return model.eval(), tok


def test_greedy_loop_matches_transformers_generate(tiny):
    model, tok = tiny
    a = sample(model, tok, PROBLEMS, SamplingParams(greedy=True, max_new_tokens=12))
    b = LoopEngine(model, tok).generate(PROBLEMS, SamplingParams(greedy=True, max_new_tokens=12))
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.finish_reason for c in a] == [c.finish_reason for c in b]
    for x, y in zip(a, b):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)


def test_sampled_rows_leave_the_batch_and_logprobs_match_rescoring(tiny):
    model, tok = tiny
    torch.manual_seed(0)
    out = LoopEngine(model, tok).generate(PROBLEMS, SamplingParams(group_size=4, temperature=1.3, max_new_tokens=10))
    assert [(c.problem_id, c.group_id, c.index) for c in out][:5] == [
        ("a", 0, 0),
        ("a", 0, 1),
        ("a", 0, 2),
        ("a", 0, 3),
        ("b", 1, 0),
    ]
    reasons = {c.finish_reason for c in out}
    for c in out:
        assert len(c.token_ids) == len(c.logprobs) >= 1
        assert (c.token_ids[-1] == tok.eos_token_id) == (c.finish_reason == "stop")
        assert tok.eos_token_id not in c.token_ids[:-1] and len(c.token_ids) <= 10
    again = completion_logprobs(model, out, tok.pad_token_id, temperature=1.3)
    for i, c in enumerate(out):
        assert torch.allclose(again[i, : len(c.token_ids)], torch.tensor(c.logprobs), atol=1e-4)
    assert reasons  # (both kinds usually occur; the per-row checks above hold either way)


def test_loop_samples_softmax_over_temperature(tiny):
    model, tok = tiny
    prompt = render_prompt(tok, PROBLEMS[1])
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1]
    p = torch.softmax(logits / 0.7, -1)
    torch.manual_seed(1)
    n = 4000
    first = [
        s[0][0]
        for s in decode(
            model,
            [prompt],
            n,
            max_new_tokens=1,
            temperature=0.7,
            truncation=Truncation(),
            greedy=False,
            eos_id=tok.eos_token_id,
            pad_id=tok.pad_token_id,
        )
    ]
    freq = torch.bincount(torch.tensor(first), minlength=len(p)).float() / n
    assert (freq - p).abs().max() < 4 * (p * (1 - p) / n).sqrt().max() + 1e-3


@pytest.mark.parametrize("rule", [Truncation(top_p=0.5), Truncation(top_k=5), Truncation(min_p=0.3)])
def test_loop_draws_from_the_truncated_set_and_records_its_log_prob(tiny, rule):
    """Every draw lies in the kept set (computed here by sorting, as transformers' warpers do), and its
    behaviour log-prob is that of the renormalised truncated distribution, not of the whole softmax."""
    model, tok = tiny
    prompt = render_prompt(tok, PROBLEMS[1])
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1]
    p = torch.softmax(logits / 0.7, -1)
    order = p.sort(descending=True)
    if rule.top_p < 1:
        keep = int((order.values.cumsum(0) - order.values < rule.top_p).sum())
    elif rule.top_k:
        keep = rule.top_k
    else:
        keep = int((order.values >= rule.min_p * order.values[0]).sum())
    allowed = order.indices[:keep]
    assert 1 < keep < len(p)
    truncated = torch.zeros_like(p).scatter(0, allowed, p[allowed])
    truncated /= truncated.sum()
    torch.manual_seed(2)
    sampled = decode(
        model,
        [prompt],
        500,
        max_new_tokens=1,
        temperature=0.7,
        truncation=rule,
        greedy=False,
        eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id,
    )
    assert {s[0][0] for s in sampled} <= set(allowed.tolist())
    for ids, logps, _, kept in sampled:
        assert abs(logps[0] - math.log(truncated[ids[0]])) < 1e-5
        assert kept[0] & ((1 << SIZE_BITS) - 1) == keep


def _settings(**kw):
    return update_settings(**{**dict(ppo_epochs=2, mini_batches=2, micro_batch_size=2, max_len=10), **kw})


@pytest.mark.parametrize("loss_type", ["grpo", "token_mean", "dr_grpo"])
def test_update_skips_zero_gradient_sequences_without_changing_the_result(tiny, loss_type):
    model, tok = tiny
    torch.manual_seed(3)
    completions = sample(model, tok, PROBLEMS[:2], SamplingParams(group_size=4, max_new_tokens=8))
    batches = [torch.tensor([1.0, -1.0, 0.5, -0.5, 0, 0, 0, 0]), torch.zeros(8)]  # then a step with no signal
    mask = torch.tensor([1, 1, 0, 1, 1, 1, 1, 1.0])
    results = []
    for skip in (True, False):
        m = __import__("copy").deepcopy(model)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
        gen = torch.Generator().manual_seed(0)
        stats = []
        for adv in batches:
            # skip_zero_gradient=False computes every sequence: the reference path without the skip
            stats.append(
                policy_update(
                    m,
                    opt,
                    completions,
                    adv,
                    mask,
                    None,
                    tok.pad_token_id,
                    _settings(loss_type=loss_type),
                    generator=gen,
                    skip_zero_gradient=skip,
                )
            )
        results.append((m, stats))
    (fast, fast_stats), (full, full_stats) = results
    for (name, a), b in zip(fast.named_parameters(), full.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert fast_stats[0]["actor/zero_grad_seqs"] > 0 and full_stats[0]["actor/zero_grad_seqs"] == 0
    assert fast_stats[0]["actor/loss"] == pytest.approx(full_stats[0]["actor/loss"], abs=1e-6)
    assert fast_stats[1]["actor/zero_grad_seqs"] == 4  # per mini-batch: all 4 skipped in the no-signal step


def test_kl_term_turns_the_skip_off(tiny):
    model, tok = tiny
    completions = sample(model, tok, PROBLEMS[:1], SamplingParams(group_size=2, max_new_tokens=4))
    with torch.no_grad():
        ref = completion_logprobs(model, completions, tok.pad_token_id, 1.0) - 0.1
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = policy_update(
        model,
        opt,
        completions,
        torch.zeros(2),
        torch.ones(2),
        ref,
        tok.pad_token_id,
        _settings(beta=0.1, mini_batches=1),
        generator=torch.Generator().manual_seed(0),
    )
    assert stats["actor/zero_grad_seqs"] == 0 and stats["actor/grad_norm"] > 0


# --- speculative decoding in the loop (rlvr.rollout.lookup) -------------------------------------

REPEATS = [Problem(id="r", prompt="12+12=24 12+12=24 12+12="), Problem(id="s", prompt="7*8=56 7*8=")]


def test_lookup_draft_copies_what_followed_the_latest_matching_ngram():
    from rlvr.rollout.lookup import lookup_draft

    assert lookup_draft([1, 2, 3, 9, 1, 2], k=3, lookup_max=4) == [3, 9, 1]
    assert lookup_draft([5, 1, 2, 7, 1, 2], k=2, lookup_max=2) == [7, 1]  # the latest occurrence wins
    assert lookup_draft([4, 5, 6], k=2, lookup_max=3) is None
    assert lookup_draft([3, 8, 3], k=3, lookup_max=3) == [8, 3, 3]  # short follow-ups are padded


def test_speculative_greedy_output_equals_plain_greedy(tiny):
    model, tok = tiny
    greedy = SamplingParams(greedy=True, max_new_tokens=20)
    plain = sample(model, tok, PROBLEMS + REPEATS, greedy)
    engine = LoopEngine(model, tok, draft_tokens=3)
    fast = engine.generate(PROBLEMS + REPEATS, greedy)
    assert [c.token_ids for c in fast] == [c.token_ids for c in plain]
    assert [c.finish_reason for c in fast] == [c.finish_reason for c in plain]
    for x, y in zip(plain, fast):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
    assert engine.speculative_stats["accept_len"] >= 1.0


def test_speculative_sampling_keeps_the_distribution(tiny):
    """The second token's frequencies against its exact marginal sum_t1 p(t1) p(t2 | t1), over 3000
    samples in one batch (rows that accepted more drafts are cut at the batch's common length). The
    draft for the second token is its most likely value, accepted about half of the time: a wrong
    acceptance rule or residual moves the frequencies by far more than the bound."""
    from rlvr.rollout.lookup import decode_speculative

    model, tok = tiny
    model = __import__("copy").deepcopy(model)
    with torch.no_grad():
        model.model.norm.weight.mul_(6.0)  # sharper distributions: drafts are neither certain nor hopeless
    prompt = render_prompt(tok, REPEATS[0])
    n, eos = 3000, tok.eos_token_id
    with torch.no_grad():
        first = torch.softmax(model(torch.tensor([prompt])).logits[0, -1], -1)  # (V,)
        v = first.shape[0]
        second = torch.softmax(model(torch.tensor([prompt + [t] for t in range(v)])).logits[:, -1], -1)  # (V, V)
    likely = second.argmax(-1)  # (V,) the draft for the second token, given the first

    def propose(context, k):
        return [int(likely[context[-1]])] * k if len(context) == len(prompt) + 1 else None

    go_on = first.clone()
    go_on[eos] = 0.0  # a sample whose first token is eos has no second token
    exact = go_on @ second / go_on.sum()  # (V,) marginal of the second token, given a first that is not eos
    torch.manual_seed(5)
    samples, stats = decode_speculative(
        model,
        [prompt],
        n,
        max_new_tokens=4,
        temperature=1.0,
        greedy=False,
        eos_id=eos,
        pad_id=tok.pad_token_id,
        draft_tokens=2,
        propose=propose,
    )
    assert 0.1 < stats["accept_rate"] < 0.9  # drafts were both accepted and rejected
    seconds = torch.tensor([ids[1] for ids, _, _ in samples if len(ids) > 1])
    assert len(seconds) > 0.5 * n
    observed = torch.bincount(seconds, minlength=v).float() / len(seconds)
    sd = (exact * (1 - exact) / len(seconds)).sqrt()
    assert ((observed - exact).abs() <= 4 * sd + 2e-3).all(), float((observed - exact).abs().max())


@pytest.mark.parametrize("loss_type", ["grpo", "token_mean"])
def test_packed_micro_batches_give_the_loss_and_gradients_of_unpacked_ones(tiny, loss_type, monkeypatch):
    """train.micro_batch_tokens packs several sequences per row (position ids restart, each attends
    only to itself): the loss and the gradient equal those of one sequence per forward, to 1e-6."""
    import rlvr.train.update as update

    shapes = []  # (sequences, rows) of every packed forward

    def spy(*args, **kwargs):
        batch = pack(*args, **kwargs)
        shapes.append((len(batch.starts), len(batch.input_ids)))
        return batch

    pack = update.pack_completions
    monkeypatch.setattr(update, "pack_completions", spy)
    model, tok = tiny
    torch.manual_seed(5)
    completions = sample(model, tok, PROBLEMS, SamplingParams(group_size=4, temperature=1.3, max_new_tokens=12))
    lengths = sorted(len(c.prompt_ids) + len(c.token_ids) for c in completions)
    adv = torch.linspace(-1, 1, len(completions))
    mask = torch.ones(len(completions))
    ref = completion_logprobs(model, completions, tok.pad_token_id, 1.0) - 0.05
    budget = 3 * lengths[-1]  # micro-batches of several rows
    results = []
    for sizes in (dict(micro_batch_size=1), dict(micro_batch_size=0, micro_batch_tokens=budget)):
        m = __import__("copy").deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=1.0)  # the step is the gradient
        stats = policy_update(
            m,
            opt,
            completions,
            adv,
            mask,
            ref,
            tok.pad_token_id,
            _settings(
                loss_type=loss_type,
                ppo_epochs=1,
                mini_batches=1,
                max_grad_norm=1e9,
                beta=0.05,
                entropy_coef=0.01,
                **sizes,
            ),
            generator=torch.Generator().manual_seed(0),
        )
        results.append(([(a - b).detach() for a, b in zip(model.parameters(), m.parameters())], stats))
    (single, single_stats), (packed, packed_stats) = results
    assert packed_stats["actor/loss"] == pytest.approx(single_stats["actor/loss"], abs=1e-6)
    for a, b in zip(single, packed):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=0)
    assert max(float(g.abs().max()) for g in single) > 1e-3  # a real gradient, not two zeros
    assert any(rows < n for n, rows in shapes[len(completions) :])  # rows that hold several sequences


def test_packing_places_several_sequences_in_a_row_each_from_position_0():
    from rlvr.scoring import pack

    batch = pack([[1, 2, 3, 4], [5], [6, 7]], [[8, 9, 10, 11], [12, 13], [14]], pad_id=0, packed=True)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 8, 9, 10, 11], [5, 12, 13, 6, 7, 14, 0, 0]]
    assert batch.position_ids[1].tolist()[:6] == [0, 1, 2, 0, 1, 2]
    assert batch.rows.tolist() == [0, 1, 1] and batch.starts.tolist() == [3, 0, 4]
