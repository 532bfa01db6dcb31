"""A step whose loss or gradient norm is not finite is skipped: weights and optimizer state bit-identical.

The NaN is injected through policy_update's `fault` hook (what debug.inject_nan_at_step uses).
"""

import copy
import math

import pytest
import torch

from rlvr.models.tiny import build_tiny_model, build_tokenizer
from rlvr.records import Problem
from helpers import sample, update_settings

from rlvr.rollout import SamplingParams
from rlvr.train.update import policy_update

G = 4


def settings(**kw):
    return update_settings(**{**dict(ppo_epochs=2, mini_batches=2, micro_batch_size=2), **kw})


@pytest.fixture
def setup():
    torch.manual_seed(0)
    tok = build_tokenizer()
    model = build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=0)
    problems = [Problem(id=f"p{i}", prompt=f"{i}+{i}=") for i in range(2)]
    completions = sample(model, tok, problems, SamplingParams(group_size=G, max_new_tokens=8))
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5] * 2)  # (N,)
    mask = torch.ones(len(completions))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def update(fault=None, **kw):
        return policy_update(
            model,
            opt,
            completions,
            advantages,
            mask,
            None,
            tok.pad_token_id,
            settings(**kw),
            generator=torch.Generator().manual_seed(0),
            fault=fault,
        )

    update()  # one clean update first, so the optimizer has state to protect
    return model, opt, update


def snapshot(model, opt):
    return copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())


def assert_identical(before, model, opt):
    weights, state = before
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    now = opt.state_dict()
    assert now["state"].keys() == state["state"].keys()
    for k, s in state["state"].items():
        for name, value in s.items():
            assert torch.equal(value, now["state"][k][name]), (k, name)


def nan_loss(loss):
    return loss * float("nan")


def inf_gradient(loss):
    # value loss + 0 (finite), but d/dloss sqrt(loss - sg(loss)) = 1 / (2 * sqrt(0)) = inf
    return loss + torch.sqrt(loss - loss.detach())


@pytest.mark.parametrize("fault", [nan_loss, inf_gradient], ids=["nan-loss", "inf-gradient"])
def test_non_finite_steps_are_skipped_and_leave_everything_bit_identical(setup, fault):
    model, opt, update = setup
    before = snapshot(model, opt)
    out = update(fault)
    assert out["actor/skipped_updates"] == 4.0  # 2 epochs x 2 mini-batches, none applied
    assert_identical(before, model, opt)
    assert all(p.grad is None for p in model.parameters())  # no poisoned gradient left behind


def test_only_the_faulty_mini_batch_is_skipped(setup):
    model, opt, update = setup
    calls = []

    def second_mini_batch(loss):  # micro-batches 2 and 3 (of 2 each) make the second mini-batch
        calls.append(1)
        return nan_loss(loss) if len(calls) in (3, 4) else loss

    before = snapshot(model, opt)
    out = update(second_mini_batch)
    assert out["actor/skipped_updates"] == 1.0
    assert len(calls) == 8
    assert any(not torch.equal(before[0][k], v) for k, v in model.state_dict().items())  # the others applied
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_clean_update_changes_the_weights(setup):
    # the counterpart of the bit-identical check: without a fault the same call does move the weights
    model, opt, update = setup
    before = snapshot(model, opt)
    assert update()["actor/skipped_updates"] == 0.0
    assert any(not torch.equal(before[0][k], v) for k, v in model.state_dict().items())


def test_bf16_model_update_is_finite_with_fp32_stats():
    # log-softmax, entropy and KL run in fp32 inside a bf16 model's update
    torch.manual_seed(0)
    tok = build_tokenizer()
    model = build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=0).to(torch.bfloat16)
    problems = [Problem(id=f"p{i}", prompt=f"{i}+{i}=") for i in range(2)]
    completions = sample(model, tok, problems, SamplingParams(group_size=G, max_new_tokens=8))
    ref_logp = torch.zeros(len(completions), max(len(c.token_ids) for c in completions)) - 3.0
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = copy.deepcopy(model.state_dict())
    out = policy_update(
        model,
        opt,
        completions,
        torch.tensor([1.0, -1.0, 0.5, -0.5] * 2),
        torch.ones(8),
        ref_logp,
        tok.pad_token_id,
        settings(beta=0.1),
        generator=torch.Generator().manual_seed(0),
    )
    assert out["actor/skipped_updates"] == 0
    assert all(math.isfinite(v) for v in out.values())
    assert out["actor/kl"] > 0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
