"""A run directory at an s3:// URL (rlvr.storage) against a real S3-compatible server the tests start
(moto's server mode on 127.0.0.1, its own process): checkpoints committed by their manifest, uploaded last; a kill -9
mid-upload, then a resume on a machine without the local cache, bit-identical to a run never killed;
the exported model loads from the URL."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ops_tiny import OPS_TINY, events, sft_cache
from s3_server import s3_server

from rlvr.checkpoint import _write, list_checkpoints, resume_point, verify
from rlvr.config import load_config
from rlvr.configlib import ConfigError
from rlvr.storage import RunStore
from rlvr.models import load_model

pytest.importorskip("s3fs")
if importlib.util.find_spec("moto") is None:  # not imported here: the server runs in its own process
    pytest.skip("moto is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def s3():
    with s3_server() as env:
        yield env


def fake_checkpoint(root: Path, step: int) -> Path:
    def write_model(path: Path) -> None:
        path.mkdir()
        (path / "weights.bin").write_bytes(bytes([step]) * 1000)

    return _write(root, step, write_model, b"state", {}).path


def test_a_checkpoint_counts_at_the_url_only_once_its_manifest_is_there(s3, tmp_path):
    store = RunStore("s3://runs/unit", tmp_path / "a")
    for step in (1, 2):
        store.push_checkpoint(fake_checkpoint(tmp_path / "a" / "checkpoints", step))
    partial = fake_checkpoint(tmp_path / "a" / "checkpoints", 3)  # cut short: its files, no manifest
    store.fs.put_file(
        str(partial / "trainer_state.pt"), store._remote("checkpoints", "step_000003", "trainer_state.pt")
    )
    assert store.committed() == (["step_000001", "step_000002"], ["step_000003"])
    assert store.pull()[-1].endswith("step_000003: not committed at s3://runs/unit")  # the URL is the run
    assert [p.name for p in list_checkpoints(tmp_path / "a" / "checkpoints")] == ["step_000001", "step_000002"]

    fresh = RunStore("s3://runs/unit", tmp_path / "b")  # another machine: nothing cached
    problems = fresh.pull()
    assert problems == ["s3://runs/unit/checkpoints/step_000003: no manifest (its upload did not finish)"]
    (got,) = list_checkpoints(tmp_path / "b" / "checkpoints")
    assert got.name == "step_000002" and verify(got) is None
    assert (got / "model" / "weights.bin").read_bytes() == bytes([2]) * 1000


def test_a_cold_start_cache_at_a_url_is_trained_once_and_downloaded_elsewhere(s3, tmp_path, monkeypatch):
    from rlvr.assembly import run_sft
    from rlvr.train import sft

    cfg = load_config(None, [*OPS_TINY, "sft.cache_dir=s3://runs/sft-cache"])
    for machine in ("a", "b"):
        (tmp_path / machine).mkdir()
    monkeypatch.chdir(tmp_path / "a")
    trained = run_sft(cfg)
    store = RunStore("s3://runs/sft-cache", tmp_path / "unused")
    (name,) = [p.rsplit("/", 1)[-1] for p in store.fs.ls(store.path)]
    assert name.startswith("sft-") and store.fs.exists(store._remote(name, "sft.json"))  # uploaded, sft.json last
    monkeypatch.chdir(tmp_path / "b")  # another machine: nothing cached, and no training allowed
    monkeypatch.setattr(sft, "train_sft", lambda *a, **k: pytest.fail("the cold start was trained again"))
    fetched = run_sft(cfg)
    assert (tmp_path / "b" / fetched).is_dir() and sft.sft_info(fetched) == sft.sft_info(tmp_path / "a" / trained)
    a, b = (load_safetensors(tmp_path / m / d) for m, d in (("a", trained), ("b", fetched)))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _train(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "train", *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_run_at_an_s3_url_resumes_after_kill_9_mid_upload_bit_identically(
    s3, tmp_path, tmp_path_factory, monkeypatch
):
    common = [
        *OPS_TINY,
        "train.steps=4",
        "ckpt.every=1",
        "ckpt.keep=2",
        "log.report=false",
        f"sft.cache_dir={sft_cache(tmp_path_factory)}",
    ]
    url = "s3://runs/killed"
    machine = tmp_path / "machine"  # the working directory: the run's local cache is under its .cache/
    machine.mkdir()
    # the reference: the same run on a local disk, never killed (a process of its own, as the others:
    # what this one has imported, vLLM say, must not change its arithmetic)
    assert _train([*common, f"run.dir={tmp_path / 'ref'}"], machine, s3).returncode == 0
    killed = _train([*common, f"run.dir={url}", "debug.kill_during_upload_at_step=3"], machine, s3)
    assert killed.returncode == -9, killed.stderr[-2000:]
    store = RunStore(url, machine / "unused")
    assert store.committed() == (["step_000001", "step_000002"], ["step_000003"])

    shutil.rmtree(machine / ".cache" / "runs")  # a new machine: only the URL holds the run
    resumed = _train([*common, f"run.dir={url}", "ckpt.resume=auto"], machine, s3)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(store.fs.cat(store._remote("summary.json")))
    assert summary["status"] == "completed" and summary["steps"] == 4
    local = machine / load_config(None, [*common, f"run.dir={url}"]).run_dir  # relative, as .cache/sft is
    assert [e["step"] for e in events(local, "resume")] == [2]
    assert store.committed() == (["step_000003", "step_000004"], [])  # ckpt.keep=2 at the URL too

    ref = load_safetensors(tmp_path / "ref" / "model")
    monkeypatch.chdir(machine)
    # ckpt.resume may name a checkpoint at the URL: downloaded and verified; a missing one is a config error
    ckpt, _ = resume_point(f"{url}/checkpoints/step_000004", machine / "unused")
    assert ckpt.step == 4 and verify(ckpt.path) is None
    with pytest.raises(ConfigError, match="ckpt.resume: .*step_000002: no such directory"):
        resume_point(f"{url}/checkpoints/step_000002", machine / "unused")  # removed by ckpt.keep=2
    exported = load_model(f"{url}/model")[0].state_dict()  # the export, loaded from the URL
    assert all(torch.equal(ref[k], exported[k]) for k in ref)

    def rows(d):
        return [r for r in map(json.loads, (Path(d) / "metrics.jsonl").read_text().splitlines()) if "reward/mean" in r]

    def strip(r):
        return {k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "sync/seconds"))}

    assert [strip(r) for r in rows(local)] == [strip(r) for r in rows(tmp_path / "ref")]


def load_safetensors(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(Path(model_dir) / "model.safetensors")


def test_a_recording_at_a_url_is_uploaded_as_it_is_written_and_continued_elsewhere(s3, tmp_path, monkeypatch):
    """rlvr serve --record s3://...: each write reaches the URL without waiting for shutdown; a server
    on another machine (an empty cache) appends to the same recording; `rlvr data recording URL` reads it."""
    import time

    from rlvr.cli import main
    from rlvr.serve.record import Recorder

    url = "s3://runs/recording"
    for machine in ("a", "b"):
        (tmp_path / machine).mkdir()
    monkeypatch.chdir(tmp_path / "a")  # where its local copy is (.cache/recordings)
    first = Recorder(url)
    first.served("r1", "tiny", "a", [{"role": "user", "content": "2+2?"}], [1, 2], [3], "4", "stop")
    fs = first.mirror.fs
    deadline = time.time() + 30
    while b"r1" not in (
        fs.cat_file("runs/recording/served.jsonl") if fs.exists("runs/recording/served.jsonl") else b""
    ):
        assert time.time() < deadline, "the response never reached the URL"
        time.sleep(0.1)
        fs.invalidate_cache()
    first.feedback({"response_id": "r1", "score": 1.0})
    first.close()

    monkeypatch.chdir(tmp_path / "b")
    second = Recorder(url)  # another machine: what the first served takes feedback here
    second.served("r2", "tiny", "a", [{"role": "user", "content": "3+3?"}], [1, 2], [3], "7", "stop")
    second.feedback({"response_id": "r2", "preferred": "6"})
    second.close()
    served = [json.loads(line) for line in fs.cat_file("runs/recording/served.jsonl").decode().splitlines()]
    assert [r["id"] for r in served] == ["r1", "r2"]
    sft = tmp_path / "sft.jsonl"
    assert main(["data", "recording", url, "--sft", str(sft)]) == 0
    assert sorted(json.loads(line)["messages"][-1]["content"] for line in sft.read_text().splitlines()) == ["4", "6"]
