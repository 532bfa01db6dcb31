"""Divergence handling end to end: an injected NaN rolls the run back to its last good checkpoint,
with a lower learning rate, and the run still finishes; out of retries, the run fails cleanly."""

from __future__ import annotations

import json
import math

import pytest
import torch
from ops_tiny import OPS_TINY, events, metric_rows, sft_cache

from rlvr.checkpoint import state_digest
from rlvr.config import load_config
from rlvr.models import load_model
from rlvr.assembly import train


def _train_here(overrides):
    threads = torch.get_num_threads()
    try:
        return train(load_config(None, overrides))
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def overrides(tmp_path, tmp_path_factory):
    return OPS_TINY + [f"run.dir={tmp_path / 'run'}", f"sft.cache_dir={sft_cache(tmp_path_factory)}"]


def test_injected_nan_rolls_back_to_the_last_good_checkpoint_and_finishes(overrides, tmp_path):
    run = tmp_path / "run"
    summary = _train_here(
        overrides
        + ["train.steps=6", "ckpt.every=2", "ckpt.keep=0", "debug.inject_nan_at_step=5", "ckpt.async_write=true"]
    )
    assert summary["status"] == "completed" and summary["steps"] == 6 and summary["rollbacks"] == 1
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    (alert,) = [e for e in events(run, "alert") if e["rule"] == "nonfinite"]
    assert alert["step"] == 5 and alert["severity"] == "critical"
    (skipped,) = events(run, "skipped_update")  # the NaN update was not applied, and said so
    assert skipped["step"] == 5 and skipped["count"] >= 1
    (rollback,) = events(run, "rollback")
    assert (rollback["step"], rollback["to_step"], rollback["rule"]) == (5, 4, "nonfinite")
    assert rollback["checkpoint"].endswith("step_000004") and rollback["lr_scale"] == 0.5
    # the weights right after the rollback are the step-4 checkpoint's, bit for bit
    good, _ = load_model(run / "checkpoints" / "step_000004" / "model")
    assert rollback["weights_sha256"] == state_digest(good.state_dict())
    # metrics describe the surviving history once per step; the retried step 5 is finite
    rows = {r["step"]: r for r in metric_rows(run) if "reward/mean" in r}
    assert sorted(rows) == [1, 2, 3, 4, 5, 6]
    assert math.isfinite(rows[5]["actor/loss"]) and rows[5]["actor/skipped_updates"] == 0
    assert rows[5]["actor/lr"] == pytest.approx(0.5 * rows[4]["actor/lr"])
    # the report of the run shows the rollback (written automatically at the end)
    assert "rollback" in (run / "report.html").read_text()


def test_divergence_without_retries_left_fails_the_run_cleanly(overrides, tmp_path):
    run = tmp_path / "run"
    summary = _train_here(
        overrides
        + ["train.steps=3", "ckpt.every=0", "rollback.max_retries=0", "debug.inject_nan_at_step=2", "log.report=false"]
    )
    assert summary["status"] == "failed" and summary["steps"] == 2
    assert json.loads((run / "summary.json").read_text())["status"] == "failed"
    (failed,) = events(run, "failed")
    assert "RunDiverged" in failed["error"] and "rollback.max_retries=0" in failed["error"]
    assert events(run, "rollback") == []


def test_a_restored_trainer_reloads_the_engine_whatever_version_it_holds(monkeypatch):
    # rollout.sync_every=2 on an engine with its own weights: after a rollback the same version number
    # comes again with other weights, so the engine is reloaded at once, not when the schedule says
    from types import SimpleNamespace

    from rlvr.train import step as step_module

    monkeypatch.setattr(step_module, "collect_batch", lambda *a, **k: SimpleNamespace(metrics={}))

    class Engine:
        version, loads = 0, []
        sync_method, sync_dtype = "shared", None

        def load_weights(self, named_tensors, version):
            self.loads.append(version)
            self.version = version

    engine = Engine()
    source = step_module.LocalBatches(engine, None, None, None, None, 1, sync_every=2)
    model, sampler = torch.nn.Linear(2, 2), object()
    for step in (1, 2, 3):  # step 1: version 0 is the engine's already; step 2 not due; step 3 due
        source.collect(model, sampler, step)
    assert engine.loads == [2]
    source.collect(model, object(), 3)  # a rollback restored step 2's checkpoint: version 2 again
    assert engine.loads == [2, 2]
    source.collect(model, source.sampler, 4)  # and the schedule goes on: step 4 is not due
    assert engine.loads == [2, 2]


def test_a_corrupted_weight_sync_alerts_and_rolls_back(overrides, tmp_path, monkeypatch):
    # an engine with weights of its own (as vLLM, FSDP or a Ray worker has): the load of policy
    # version 3 changes one value; the checksum catches it, and the run goes back to step 2
    import copy

    from rlvr.assembly import parts
    from test_weight_sync import corrupting

    build = parts.build_engine
    monkeypatch.setattr(
        parts,
        "build_engine",
        lambda rollout, model, *a, **k: corrupting(build(rollout, copy.deepcopy(model), *a, **k), at_version=3),
    )
    run = tmp_path / "run"
    summary = _train_here(overrides + ["train.steps=5", "ckpt.every=2", "ckpt.keep=0", "log.report=false"])
    assert summary["status"] == "completed" and summary["rollbacks"] == 1
    (alert,) = [e for e in events(run, "alert") if e["rule"] == "weight_sync"]
    assert alert["step"] == 4 and alert["severity"] == "critical"
    (rollback,) = events(run, "rollback")
    assert (rollback["step"], rollback["to_step"], rollback["rule"]) == (4, 2, "weight_sync")
    rows = {r["step"]: r for r in metric_rows(run) if "reward/mean" in r}
    assert sorted(rows) == [1, 2, 3, 4, 5]
    assert all(rows[s]["sync/method"] == "copy" and rows[s]["sync/bytes"] > 0 for s in range(2, 6))
    assert sum(r.get("sync/checksum_mismatch", 0) for r in rows.values()) == 0  # the corrupted step: rolled back
