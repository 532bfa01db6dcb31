"""Truncated sampling (top-k, top-p, min-p) done right: the engines record the log-prob of the
distribution they drew from and the set it kept, the trainer renormalises over the same set
(sampling replay), and the parity check names the cause of a gap, one injected fault per cause."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.algos.parity import ParityEvidence, attribute
from rlvr.algos.truncation import ReplayStats, Truncation, dropped, prefix_records
from rlvr.records import Problem
from rlvr.rollout import HFEngine, LoopEngine, SamplingParams
from rlvr.scoring import completion_logprobs, completion_scores, pack_completions
from rlvr.train.parity import batch_evidence, engine_precision, engine_weights_differ, parity_metrics
from rlvr.train.sync import sync_weights
from test_models import one_thread, save_tiny  # noqa: F401  (one_thread: autouse fixture)

PROBLEMS = [Problem(id=str(i), prompt=f"{i}+{i + 3}=") for i in range(4)]
RULES = {"top_p": Truncation(top_p=0.9), "top_k": Truncation(top_k=20), "min_p": Truncation(min_p=0.05)}
TEMPERATURE = 1.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay-tiny")
    save_tiny(path)
    from rlvr.models import load_model

    model, tok = load_model(path)
    with torch.no_grad():
        model.model.norm.weight.mul_(6.0)  # sharper distributions: each truncation cuts real mass
    return model.eval(), tok


def _params(rule: Truncation, **kw) -> SamplingParams:
    return SamplingParams(
        group_size=4,
        temperature=TEMPERATURE,
        max_new_tokens=16,
        top_p=rule.top_p,
        top_k=rule.top_k,
        min_p=rule.min_p,
        **kw,
    )


def _gap(trainer: torch.Tensor, completions) -> float:
    return max(
        float((trainer[i, : len(c.logprobs)] - torch.tensor(c.logprobs)).abs().max()) for i, c in enumerate(completions)
    )


@pytest.mark.parametrize("engine_cls", [LoopEngine, HFEngine])
@pytest.mark.parametrize("name", list(RULES))
def test_replayed_log_probs_equal_the_engines_within_1e5(tiny, engine_cls, name):
    model, tok = tiny
    rule = RULES[name]
    torch.manual_seed(0)
    out = engine_cls(model, tok).generate(PROBLEMS, _params(rule))
    assert all(c.kept is not None and len(c.kept) == len(c.token_ids) for c in out)
    stats = ReplayStats()
    replayed = completion_logprobs(model, out, tok.pad_token_id, TEMPERATURE, truncation=rule, replay_stats=stats)
    whole = completion_logprobs(model, out, tok.pad_token_id, TEMPERATURE)
    assert _gap(replayed, out) <= 1e-5
    assert _gap(whole, out) > 1e-2  # today's gap without replay: the whole softmax is another distribution
    assert stats.tokens == sum(len(c.token_ids) for c in out) and stats.set_mismatch == 0


def test_untruncated_sampling_records_nothing(tiny):
    model, tok = tiny
    out = LoopEngine(model, tok).generate(PROBLEMS, _params(Truncation()))
    assert all(c.kept is None for c in out)


def test_replay_gradients_are_those_of_the_masked_log_softmax(tiny):
    """The fused head's hand-written backward, with kept sets, against autograd through the full
    logits (the path of a model whose head is no plain linear layer), in fp32; that path runs in bf16."""
    model, tok = tiny
    rule = RULES["top_k"]
    torch.manual_seed(1)
    out = LoopEngine(model, tok).generate(PROBLEMS[:2], _params(rule))
    batch = pack_completions(out, tok.pad_token_id)
    weights = torch.randn(batch.targets.shape)

    def grads(fused: bool, dtype: str = "float32") -> tuple[torch.Tensor, torch.Tensor]:
        m = copy.deepcopy(model)
        if not fused:
            m.get_output_embeddings = lambda: None  # no linear head to stand in for: the full logits
        logp, entropy = completion_scores(m, batch, TEMPERATURE, truncation=rule, dtype=dtype)
        ((logp + 0.3 * entropy) * weights).sum().backward()
        return logp.detach(), m.model.layers[0].mlp.down_proj.weight.grad

    (a, ga), (b, gb) = grads(True), grads(False)
    assert torch.allclose(a, b, atol=1e-5)
    assert torch.allclose(ga, gb, atol=1e-5, rtol=1e-4)
    c, gc = grads(False, "bfloat16")
    assert torch.isfinite(c).all() and torch.isfinite(gc).all() and (c - a).abs().max() < 0.1


def test_tied_logits_keep_exactly_the_recorded_size():
    """bf16 logits tie often: the trainer keeps exactly the engine's count, so the normaliser is the
    engine's whichever of the tied tokens each side kept."""
    gen = torch.Generator().manual_seed(0)
    z = (torch.randn(64, 300, generator=gen) * 4).round() / 4  # ties at every boundary
    for rule in RULES.values():
        vals, ids, n = rule.kept_prefix(z)
        records = prefix_records(ids, n, z.shape[-1])
        out = dropped(z, records, ids[:, 0], rule)
        assert torch.equal((~out).sum(-1), n)
        inside = torch.arange(vals.shape[1]) < n[:, None]
        engine = torch.logsumexp(vals.masked_fill(~inside, float("-inf")), -1)
        torch.testing.assert_close(torch.logsumexp(z.masked_fill(out, float("-inf")), -1), engine)


# --- the parity check: one injected fault per cause --------------------------------------------


def _check(model, tok, engine, out, rule: Truncation, *, replayed: bool = True, version: int = 0) -> dict:
    """The step's check as rlvr.train.grpo runs it: the trainer scores the batch, evidence on demand."""
    stats = ReplayStats()
    logp = completion_logprobs(
        model, out, tok.pad_token_id, TEMPERATURE, truncation=rule if replayed else None, replay_stats=stats
    )

    def evidence():
        return batch_evidence(
            out,
            replayed=replayed,
            replay=stats,
            engine_dtype=engine_precision(engine),
            trainer_dtype="float32",
            weights_mismatch=engine_weights_differ(engine, model, version),
        )

    return parity_metrics(logp, out, torch.ones(len(out)), version, 1e-3, evidence)


def test_a_clean_batch_names_no_cause(tiny):
    model, tok = tiny
    engine = LoopEngine(model, tok)
    torch.manual_seed(2)
    found = _check(model, tok, engine, engine.generate(PROBLEMS, _params(RULES["top_p"])), RULES["top_p"])
    assert found["rollout/parity_gap_max"] <= 1e-5 and "rollout/parity_cause" not in found


def test_replay_off_in_the_trainer_is_named_truncation(tiny):
    model, tok = tiny
    engine = LoopEngine(model, tok)
    torch.manual_seed(3)
    out = engine.generate(PROBLEMS, _params(RULES["top_p"]))
    found = _check(model, tok, engine, out, RULES["top_p"], replayed=False)
    assert found["rollout/parity_cause"] == "truncation" and "sampling_replay=false" in found["rollout/parity_evidence"]


def test_a_bf16_engine_against_an_fp32_trainer_is_named_precision(tiny):
    model, tok = tiny
    engine = LoopEngine(model, tok, dtype="bfloat16")
    torch.manual_seed(4)
    found = _check(model, tok, engine, engine.generate(PROBLEMS, _params(Truncation())), Truncation())
    assert found["rollout/parity_cause"] == "precision", found


def test_a_weight_corrupted_after_the_sync_is_named_weights(tiny):
    model, tok = tiny
    engine = HFEngine(copy.deepcopy(model), tok)
    synced = sync_weights(engine, model, 1, 1)
    assert synced.method == "copy" and synced.mismatch == 0
    with torch.no_grad():
        engine.model.model.layers[1].mlp.down_proj.weight.mul_(1.5)  # one tensor, after the check
    torch.manual_seed(5)
    found = _check(model, tok, engine, engine.generate(PROBLEMS, _params(Truncation())), Truncation(), version=1)
    assert found["rollout/parity_cause"] == "weights", found


def test_a_turn_re_encoded_by_a_template_is_named_template(tiny):
    model, tok = tiny
    engine = LoopEngine(model, tok)
    torch.manual_seed(6)
    out = engine.generate(PROBLEMS, _params(Truncation()))
    for c in out[:3]:  # the turn comes back rendered by the chat template, as text re-tokenised
        ids = tok.apply_chat_template([{"role": "assistant", "content": c.text}], tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        assert ids != c.token_ids
        c.token_ids, c.logprobs = ids, (c.logprobs + [0.0] * len(ids))[: len(ids)]
        c.turns[0].end = len(ids)
    found = _check(model, tok, engine, out, Truncation())
    assert found["rollout/parity_cause"] == "template", found


def test_a_different_kernel_is_named_kernel(tiny):
    """The same weights (synced, checksum equal), dtype and sets, but the engine computes its LM head
    otherwise (a 2% error, as a kernel that accumulates in another order and precision would)."""
    model, tok = tiny
    engine = HFEngine(copy.deepcopy(model), tok)
    assert sync_weights(engine, model, 1, 1).mismatch == 0
    engine.model.lm_head.register_forward_hook(lambda module, args, output: output * 1.02)
    torch.manual_seed(7)
    found = _check(model, tok, engine, engine.generate(PROBLEMS, _params(Truncation())), Truncation(), version=1)
    assert found["rollout/parity_cause"] == "kernel", found


def test_causes_by_hand_and_their_order():
    over = 0.5
    assert attribute(1e-4, 1e-3, ParityEvidence(weights_mismatch=1)) is None  # under the threshold: no cause
    assert attribute(over, 1e-3, ParityEvidence(weights_mismatch=1, drifted_turns=2))[0] == "weights"
    assert attribute(over, 1e-3, ParityEvidence(drifted_turns=2, truncated_tokens=5, replayed=False))[0] == "template"
    assert attribute(over, 1e-3, ParityEvidence(truncated_tokens=5, replayed=False, engine_dtype="bfloat16"))[0] == (
        "truncation"
    )
    assert attribute(over, 1e-3, ParityEvidence(set_mismatch=3, engine_dtype="bfloat16"))[0] == "precision"
    assert attribute(over, 1e-3, ParityEvidence(set_mismatch=3))[0] == "truncation"
    assert attribute(over, 1e-3, ParityEvidence())[0] == "kernel"


def test_older_policies_tokens_are_left_out_of_the_check(tiny):
    """Tokens an older policy sampled (deploy.async, sync_every > 1) differ by design: not a fault."""
    model, tok = tiny
    engine = LoopEngine(model, tok)
    torch.manual_seed(8)
    out = engine.generate(PROBLEMS, _params(RULES["top_k"]))
    assert _check(model, tok, engine, out, RULES["top_k"], replayed=False, version=1) == {}


def test_a_run_without_replay_alerts_naming_truncation_at_its_first_step(tiny_overrides, tmp_path):
    """The whole chain in `rlvr train`: truncated sampling, replay off in the trainer only, the check's
    metrics in metrics.jsonl and its one-line alert in events.jsonl at step 1."""
    from ops_tiny import events, metric_rows

    from rlvr.cli import main

    run = tmp_path / "run"
    overrides = ["train.steps=1", "rollout.engine=loop", "rollout.top_p=0.9", "rollout.sampling_replay=false"]
    assert main(["train", *tiny_overrides, *overrides]) == 0
    step = next(r for r in metric_rows(run) if r.get("step") == 1 and "rollout/parity_gap_max" in r)
    assert step["rollout/parity_gap_max"] > 1e-2 and step["rollout/parity_cause"] == "truncation"
    (alert,) = [e for e in events(run, "alert") if e["rule"] == "logprob_parity"]
    assert alert["step"] == 1 and "cause truncation" in alert["message"] and "\n" not in alert["message"]
