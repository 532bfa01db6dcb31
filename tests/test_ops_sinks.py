"""Metric sinks (Prometheus endpoint, W&B and MLflow adapters, JSONL rewind) and checkpoint mechanics
(atomic write, verification, retention with a best-by-metric, background writes, in-place restore)."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from rlvr.checkpoint import Checkpointer, latest_valid, list_checkpoints, load_weights, state_digest, verify
from rlvr.config import ConfigError, load_config
from rlvr.console import RunConsole
from rlvr.models import load_model
from rlvr.models.tiny import save_tiny
from rlvr.ops.sinks import PrometheusSink, build_sinks
from rlvr.evaluate import eval_metrics
from rlvr.records import RewardResult
from rlvr.rewards.monitor import agreement
from rlvr.runlog import RunLog, read_jsonl
from tracking_files import offline_tracking, wandb_history


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_prometheus_serves_metrics_and_health():
    sink = PrometheusSink("127.0.0.1", 0, stale_s=60.0)
    try:
        base = f"http://127.0.0.1:{sink.port}"
        sink.metrics(3, {"reward/mean": 0.25, "actor/loss": float("nan"), "eval/accuracy": 0.5})
        sink.event({"kind": "alert", "step": 3})
        status, text = _get(base + "/metrics")
        assert status == 200
        assert "rlvr_reward_mean 0.25" in text and "rlvr_step 3.0" in text and "rlvr_actor_loss" not in text
        assert 'rlvr_events_total{kind="alert"} 1.0' in text
        status, body = _get(base + "/healthz")
        assert status == 200 and json.loads(body)["status"] == "ok" and json.loads(body)["step"] == 3
        sink.event({"kind": "failed", "step": 4})
        status, body = _get(base + "/healthz")
        assert status == 503 and json.loads(body)["status"] == "failed"
        # a taken port is a config error that names the key, before any training starts
        cfg = load_config(None, [f"log.prometheus_port={sink.port}", "log.tensorboard=false"])
        with pytest.raises(ConfigError, match="log.prometheus_port: cannot listen on 127.0.0.1"):
            build_sinks(cfg.log, Path("unused"), cfg.to_dict(), resume_step=None, ui=RunConsole(False))
    finally:
        sink.close()


def pool_health(events: list[dict]) -> tuple[int, dict]:
    """/healthz after these events (a Ray run's events.jsonl)."""
    sink = PrometheusSink("127.0.0.1", 0, stale_s=60.0)
    try:
        sink.metrics(1, {})
        for e in events:
            sink.event(e)
        status, body = _get(f"http://127.0.0.1:{sink.port}/healthz")
        return status, json.loads(body)
    finally:
        sink.close()


def test_healthz_lists_every_ray_pool_and_a_dead_worker_fails_it():
    placed = [
        {"kind": "placement", "module": m, "replica": j, "pid": 100 + j, "device": "cpu"}
        for m, n in (("rollout", 2), ("reward", 1), ("trainer", 1))
        for j in range(n)
    ]
    status, body = pool_health(
        placed
        + [
            {"kind": "worker_failed", "module": "rollout", "replica": 1, "reissued": True},
            {"kind": "worker_restarted", "module": "rollout", "replica": 1, "old_pid": 101, "new_pid": 201},
            {"kind": "worker_timeout", "module": "reward", "replica": 0},
        ]
    )
    assert status == 200 and body["status"] == "ok"
    assert body["pools"]["rollout"]["1"] == {
        "state": "up",
        "restarts": 1,
        "failures": 1,
        "timeouts": 0,
        "pid": 201,
        "device": "cpu",
    }
    assert body["pools"]["rollout"]["0"]["restarts"] == 0 and body["pools"]["reward"]["0"]["state"] == "restarting"
    status, body = pool_health(
        placed + [{"kind": "worker_failed", "module": "reward", "replica": 0, "reissued": False}]
    )
    assert status == 503 and body["status"] == "degraded" and body["pools"]["reward"]["0"]["state"] == "dead"


def test_wandb_and_mlflow_sinks_write_every_row_and_key_with_the_real_libraries(tmp_path, monkeypatch):
    """W&B in offline mode and MLflow's local file store, read back from what they wrote: W&B rows carry
    the training step as a metric, so the rows after a rollback (steps seen before) are kept; MLflow has
    every config key as a param (more than its 100 per call) and every row; alerts reach both."""
    import mlflow

    offline_tracking(monkeypatch)
    uri = f"file:{tmp_path / 'mlruns'}"
    cfg = load_config(
        None,
        [
            f"run.dir={tmp_path}",
            "log.tensorboard=false",
            "log.wandb_project=rl",
            f"log.mlflow_tracking_uri={uri}",
            "run.name=r1",
        ],
    )
    log = RunLog(
        tmp_path,
        cfg.to_dict(),
        sinks=build_sinks(cfg.log, tmp_path, cfg.to_dict(), resume_step=None, ui=RunConsole(False)),
    )
    log.metrics(1, {"reward/mean": 0.5, "actor/kl": float("inf")})
    log.metrics(2, {"reward/mean": 0.6})
    log.event("rollback", step=2, reason="test")
    log.rewind(1)
    log.metrics(2, {"reward/mean": 0.7})  # after the rollback: step 2 again
    # keys as the trainer writes them, per source and per pair: none may be both a metric and a folder
    # of metrics, which MLflow's file store cannot hold (a file and a directory of one name)
    log.metrics(
        3,
        {
            **eval_metrics({"accuracy": 0.5, "format": 1.0, "by_source": {"a": 0.4, "b": 0.6}}),
            **agreement([RewardResult(0.0, {"correct": c, "format": f}) for c, f in ((0, 1), (1, 1), (1, 0))]),
        },
    )
    log.close()
    assert wandb_history(tmp_path)[:3] == [
        {"train/step": 1, "reward/mean": 0.5},
        {"train/step": 2, "reward/mean": 0.6},
        {"train/step": 2, "reward/mean": 0.7},
    ]
    client = mlflow.tracking.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name(cfg.log.mlflow_experiment).experiment_id])
    assert run.info.run_name == tmp_path.name and run.data.tags["last_rollback"] == "test"
    params = run.data.params
    assert len(params) == len(_leaves(cfg.to_dict())) > 100 and params["train.lr"] == str(cfg.train.lr)
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "reward/mean")] == [
        (1, 0.5),
        (2, 0.6),
        (2, 0.7),
    ]
    assert {"eval/accuracy", "eval/source/a/accuracy", "reward/agreement/mean"} <= set(run.data.metrics)
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    with pytest.raises(ConfigError, match=r"log.wandb_project: wandb is not installed: pip install 'rlvr\[tracking\]'"):
        build_sinks(cfg.log, tmp_path, cfg.to_dict(), resume_step=None, ui=RunConsole(False))


def _leaves(d: dict, prefix: str = "") -> list[str]:
    return [
        k
        for key, v in d.items()
        for k in (_leaves(v, f"{prefix}{key}.") if isinstance(v, dict) and v else [prefix + key])
    ]


def test_runlog_rewind_drops_later_rows_and_a_half_written_line(tmp_path):
    log = RunLog(tmp_path, {})
    for step in range(5):
        log.metrics(step, {"reward/mean": step / 10})
        log.samples(step, [{"completion": f"c{step}"}])
    log.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "reward/me')  # what a SIGKILL mid-write leaves
    resumed = RunLog(tmp_path, {}, resume_step=2)
    resumed.metrics(3, {"reward/mean": 0.9})
    resumed.close()
    assert [(r["step"], r["reward/mean"]) for r in read_jsonl(tmp_path / "metrics.jsonl")] == [
        (0, 0.0),
        (1, 0.1),
        (2, 0.2),
        (3, 0.9),
    ]
    assert [r["step"] for r in read_jsonl(tmp_path / "samples.jsonl")] == [0, 1, 2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    save_tiny(path, 16, 1, 2, seed=0)
    return load_model(path)


def _trained(model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, model.config.vocab_size, (2, 6))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    return opt


def test_checkpoint_round_trip_async_equals_sync_and_restores_in_place(tiny, tmp_path):
    model, tok = tiny
    opt = _trained(model)
    state = {"optimizer": opt.state_dict(), "step_note": "x"}
    Checkpointer(tmp_path / "sync", config_hash="h", keep=0).save(1, model, tok, state)
    writer = Checkpointer(tmp_path / "async", config_hash="h", keep=0, async_write=True)
    writer.save(1, model, tok, state)
    digest = state_digest(model.state_dict())
    with torch.no_grad():  # training goes on while the background write runs: the copy must not see it
        for p in model.parameters():
            p.add_(1.0)
    writer.wait()
    for root in ("sync", "async"):
        ckpt = latest_valid(tmp_path / root)
        assert ckpt is not None and verify(ckpt.path) is None
        load_weights(model, ckpt.model_dir)  # in place: the optimizer keeps its parameter references
        assert state_digest(model.state_dict()) == digest
        assert torch.equal(
            ckpt.trainer_state()["optimizer"]["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"]
        )
        assert ckpt.manifest()["config_hash"] == "h"


def test_a_crash_mid_write_never_leaves_a_valid_looking_checkpoint(tiny, tmp_path):
    model, tok = tiny
    ckpts = Checkpointer(tmp_path, config_hash="h", keep=0)
    ckpts.save(2, model, tok, {})
    # a write killed before its rename: only a .tmp directory, never listed
    (tmp_path / "step_000004.tmp" / "model").mkdir(parents=True)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000002"]
    # a renamed directory whose files were damaged later: found, reported, skipped
    ckpts.save(3, model, tok, {})
    (tmp_path / "step_000003" / "trainer_state.pt").write_bytes(b"garbage")
    skipped = []
    assert latest_valid(tmp_path, on_skip=lambda p, why: skipped.append((p.name, why))).step == 2
    assert skipped == [("step_000003", "checksum mismatch in trainer_state.pt (truncated or corrupted)")]


def test_retention_keeps_the_newest_n_plus_the_best(tiny, tmp_path):
    model, tok = tiny
    ckpts = Checkpointer(tmp_path, config_hash="h", keep=2, keep_best="eval/accuracy", best_mode="max")
    for step, acc in [(10, 0.2), (20, 0.6), (30, None), (40, 0.4), (50, None)]:
        ckpts.save(step, model, tok, {}, metrics={} if acc is None else {"eval/accuracy": acc})
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000020", "step_000040", "step_000050"]
    low = Checkpointer(tmp_path / "min", config_hash="h", keep=1, keep_best="actor/loss", best_mode="min")
    for step, loss in [(1, 0.5), (2, 0.1), (3, 0.3)]:
        low.save(step, model, tok, {}, metrics={"actor/loss": loss})
    assert [p.name for p in list_checkpoints(tmp_path / "min")] == ["step_000002", "step_000003"]
