"""Kill -9 and resume: the same final weights and per-step metrics as an uninterrupted run; corrupt
checkpoints are reported and skipped in favour of older ones."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from ops_tiny import OPS_TINY, events, logged_step, metric_rows, sft_cache
from safetensors.torch import load_file

from rlvr.config import load_config
from rlvr.assembly import run_sft, train

RUN = OPS_TINY + ["train.steps=8", "ckpt.every=3", "ckpt.keep=0", "log.report=false"]


def _train_cmd(run_dir, cache, *extra):
    return [sys.executable, "-m", "rlvr.cli", "train", *RUN, f"run.dir={run_dir}", f"sft.cache_dir={cache}", *extra]


def _weights(path):
    return load_file(path / "model.safetensors")


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    cache = sft_cache(tmp_path_factory)
    run_sft(load_config(None, RUN + [f"sft.cache_dir={cache}"]))  # once, before two processes want it
    base = tmp_path_factory.mktemp("resume")
    ref_dir, run_dir = base / "uninterrupted", base / "killed"
    logs = {name: open(base / f"{name}.log", "w") for name in ("ref", "victim")}
    ref = subprocess.Popen(_train_cmd(ref_dir, cache), stdout=logs["ref"], stderr=subprocess.STDOUT)
    victim = subprocess.Popen(_train_cmd(run_dir, cache), stdout=logs["victim"], stderr=subprocess.STDOUT)
    # SIGKILL as soon as step 4 is logged: the checkpoint of step 3 is on disk, and the rows of
    # step 4 (and any later) were written by a process that is gone: they must not survive.
    deadline = time.time() + 180
    while not logged_step(run_dir, 4):
        assert victim.poll() is None, (base / "victim.log").read_text()[-2000:]
        assert time.time() < deadline, "step 4 never logged"
        time.sleep(0.005)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    at_kill = {
        "returncode": victim.returncode,
        "summary": (run_dir / "summary.json").exists(),
        "checkpoints": sorted(p.name for p in (run_dir / "checkpoints").iterdir()),
        "last_step": max(
            json.loads(x).get("step", 0)
            for x in (run_dir / "metrics.jsonl").read_text().splitlines()
            if x.strip().endswith("}")
        ),
    }
    summary = _train_here(RUN + [f"run.dir={run_dir}", f"sft.cache_dir={cache}", "ckpt.resume=auto"])
    assert ref.wait(timeout=300) == 0, (base / "ref.log").read_text()[-2000:]
    assert summary["status"] == "completed"
    return {"ref": ref_dir, "run": run_dir, "at_kill": at_kill, "cache": cache}


def _train_here(overrides):
    """Train in this process (no interpreter start-up), leaving torch's thread count as it was."""
    threads = torch.get_num_threads()
    try:
        return train(load_config(None, overrides))
    finally:
        torch.set_num_threads(threads)


def test_kill9_after_a_checkpoint_then_resume_matches_the_uninterrupted_run(killed_and_resumed):
    ref, run, at_kill = killed_and_resumed["ref"], killed_and_resumed["run"], killed_and_resumed["at_kill"]
    # it really was killed mid-run, after the step-3 checkpoint and past it
    assert at_kill["returncode"] == -signal.SIGKILL and not at_kill["summary"]
    assert "step_000003" in at_kill["checkpoints"] and at_kill["last_step"] >= 4
    resume = events(run, "resume")
    assert [e["step"] for e in resume] == [3]
    # bit-identical final weights, and the weights did move after the resume point
    final_ref, final_run = _weights(ref / "model"), _weights(run / "model")
    assert final_ref.keys() == final_run.keys()
    assert all(torch.equal(final_ref[k], final_run[k]) for k in final_ref)
    at_3 = _weights(run / "checkpoints" / "step_000003" / "model")
    assert any(not torch.equal(at_3[k], final_run[k]) for k in at_3)
    # identical per-step metrics (timings aside): nothing lost, nothing repeated
    rows_ref, rows_run = metric_rows(ref), metric_rows(run)
    assert [r["step"] for r in rows_run] == [0, *range(1, 9), 8]
    assert rows_run == rows_ref
    assert (ref / "samples.jsonl").read_text() == (run / "samples.jsonl").read_text()
    # the evaluation before RL survives the kill: the same per-problem rows and the same paired test
    assert (ref / "eval.jsonl").read_text() == (run / "eval.jsonl").read_text()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 8
    assert summary["eval_change"] == json.loads((ref / "summary.json").read_text())["eval_change"] is not None


def test_corrupt_and_half_written_checkpoints_are_skipped(killed_and_resumed, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(killed_and_resumed["ref"], run)
    ckpts = run / "checkpoints"
    weights = ckpts / "step_000008" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    shutil.copytree(ckpts / "step_000006", ckpts / "step_000009")
    (ckpts / "step_000009" / "manifest.json").unlink()  # a write that died before its manifest
    summary = _train_here(
        RUN + [f"run.dir={run}", f"sft.cache_dir={killed_and_resumed['cache']}", "ckpt.resume=auto", "train.steps=10"]
    )
    assert summary["status"] == "completed" and summary["steps"] == 10
    skipped = [e["problem"] for e in events(run, "checkpoint_skipped")]
    assert len(skipped) == 2 and "step_000009" in skipped[0] and "no manifest" in skipped[0]
    assert "step_000008" in skipped[1] and "checksum mismatch" in skipped[1]
    (resume,) = events(run, "resume")
    assert resume["step"] == 6 and "train.steps: 8 -> 10" in resume["config_changes"]
    rows = metric_rows(run)
    assert [r["step"] for r in rows] == [0, *range(1, 11), 10]
    # steps 7 and 8 replayed from the step-6 checkpoint are the uninterrupted run's steps 7 and 8
    ref_rows = {r["step"]: r for r in metric_rows(killed_and_resumed["ref"]) if "reward/mean" in r}
    assert [r for r in rows if r["step"] in (7, 8) and "reward/mean" in r] == [ref_rows[7], ref_rows[8]]
