"""Weight sync measured and checked (rlvr.rollout.sync): bytes, seconds and method of every sync, and
a checksum of what the engine holds against what the trainer sent; a corrupted tensor is caught on
an engine with its own copy, in a Ray worker's check, and in a run, where it rolls the run back."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr.config import load_config
from rlvr.deploy.ray import sync as ray_sync
from rlvr.ops.alerts import AlertRules
from rlvr.config.ops import AlertsConfig, RollbackConfig
from rlvr.cli.plan import run_plan
from rlvr.plan import Cluster, Shape
from rlvr.rollout import HFEngine
from rlvr.rollout.sync import checksum, tied_names
from rlvr.train.sync import sync_weights


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg)


def corrupting(engine, at_version: int):
    """The engine, except that the first load of `at_version` changes one value after it arrives."""
    load, fired = engine.load_weights, []

    def load_weights(named_tensors, version):
        load(named_tensors, version)
        if version == at_version and not fired:
            fired.append(version)
            with torch.no_grad():
                next(engine.model.parameters()).view(-1)[3] += 0.5

    engine.load_weights = load_weights
    return engine


def test_the_checksum_ignores_layout_and_sees_one_changed_value():
    q, k, v = (torch.randn(8, 4) for _ in range(3))
    fused = torch.cat([q, k, v])  # vLLM's qkv_proj, padded as a vocabulary is
    assert checksum([q, k, v]) == checksum([torch.cat([fused, torch.zeros(2, 4)])]) == checksum([v, q, k])
    assert checksum([q.to(torch.bfloat16)]) == checksum([q], torch.bfloat16) != checksum([q])
    changed = q.clone()
    changed[2, 1] = torch.nextafter(changed[2, 1], torch.tensor(9.0))  # one value, the least it can move
    assert checksum([changed]) != checksum([q])


def test_a_sync_into_an_engine_copy_reports_bytes_method_and_a_corrupted_tensor(policy):
    assert tied_names(policy) == {"lm_head.weight"}
    engine = corrupting(HFEngine(copy.deepcopy(policy), None), at_version=2)
    synced = sync_weights(engine, policy, version=1, step=2)
    assert synced.method == "copy" and synced.mismatch == 0 and synced.seconds > 0
    assert synced.bytes == sum(t.numel() * t.element_size() for t in policy.state_dict().values())
    assert sync_weights(engine, policy, version=1, step=3) is None  # holds that version already
    assert sync_weights(engine, policy, version=2, step=3).mismatch == 1
    assert sync_weights(engine, policy, version=3, step=4).mismatch == 0  # the next sync repairs it
    shared = sync_weights(HFEngine(policy, None), policy, version=1, step=2)  # the trainer's own tensors
    assert (shared.method, shared.bytes, shared.mismatch) == ("shared", 0, 0)


def test_a_ray_worker_checks_what_arrived_and_what_it_holds(policy, monkeypatch):
    weights = {name: t.detach().clone() for name, t in policy.state_dict().items()}
    tied = tied_names(policy)
    handle = ray_sync.WeightHandle(
        1, names=tuple(weights), checksum=checksum(t for n, t in weights.items() if n not in tied), tied=tied
    )
    monkeypatch.setattr(ray_sync, "fetch_weights", lambda h: weights)
    assert ray_sync.load_published(HFEngine(copy.deepcopy(policy), None), handle).checksum_ok
    bad = corrupting(HFEngine(copy.deepcopy(policy), None), at_version=1)
    assert not ray_sync.load_published(bad, handle).checksum_ok
    weights["model.norm.weight"][0] += 1.0  # changed on its way through the object store
    assert not ray_sync.load_published(HFEngine(copy.deepcopy(policy), None), handle).checksum_ok


def test_a_mismatch_is_a_critical_alert_of_a_default_rollback_rule():
    assert "weight_sync" in RollbackConfig().rules
    rules = AlertRules(AlertsConfig(), rollback_rules=set(RollbackConfig().rules))
    assert rules.check(1, {"sync/checksum_mismatch": 0.0, "sync/method": "copy"}) == []
    (alert,) = rules.check(2, {"sync/checksum_mismatch": 1.0, "sync/method": "vllm_reload"})
    assert alert.rule == "weight_sync" and alert.severity == "critical" and "vllm_reload" in alert.message


def test_the_plan_counts_a_syncs_bytes_and_time():
    shape = Shape(layers=2, hidden=64, heads=2, kv_heads=2, intermediate=128, vocab=100)
    embedded = run_plan(load_config(None, []), shape, Cluster(), sync_gbps=1.0)
    assert embedded["sync"] == {"method": "shared", "bytes": 0, "every_steps": 1} and "sync_s" not in embedded["times"]
    ray = run_plan(load_config(None, ["deploy.backend=ray", "rollout.sync_every=2"]), shape, Cluster(), sync_gbps=2.0)
    assert ray["sync"] == {"method": "object_store", "bytes": 4 * shape.params, "every_steps": 2}
    assert ray["times"]["sync_s"] == pytest.approx(4 * shape.params / 2e9 / 2)
