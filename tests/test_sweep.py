"""`rlvr sweep`: the grid from the arguments, trials on Ray Tune, a failing trial reported, not fatal."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray.tune")

from rlvr.cli import main  # noqa: E402
from rlvr.configlib import ConfigError  # noqa: E402
from rlvr.sweep import axes, split_values, trials  # noqa: E402


def test_the_grid_from_the_arguments():
    assert split_values("1,[a,b],{x: 1, y: 2}") == ["1", "[a,b]", "{x: 1, y: 2}"]
    swept, fixed = axes(
        ["algo.beta=0.001,0.003,0.01,0.03", "train.lr=1e-5,3e-5", "train.steps=100", "data.files=[a.jsonl,b.jsonl]"]
    )
    assert swept == {"algo.beta": ["0.001", "0.003", "0.01", "0.03"], "train.lr": ["1e-5", "3e-5"]}
    assert fixed == ["train.steps=100", "data.files=[a.jsonl,b.jsonl]"]
    grid = trials(swept)
    assert len(grid) == 8 and grid[0] == ["algo.beta=0.001", "train.lr=1e-5"]
    assert len(trials(swept, samples=3)) == 3 and all(t in grid for t in trials(swept, samples=3))
    with pytest.raises(ConfigError, match="at least one"):
        axes(["train.steps=3"])


def test_a_sweep_at_a_url_runs_every_trial_there_and_reports_the_one_that_diverged(
    tmp_path, sft_cache, capsys, monkeypatch
):
    """--out at an s3:// URL (moto's server): every trial a run directory there, the reports beside them."""
    import fsspec
    from conftest import TINY
    from s3_server import s3_server

    pytest.importorskip("s3fs")
    monkeypatch.chdir(tmp_path)  # the local caches (.cache/runs, .cache/sweeps) start empty
    with s3_server():
        out = "s3://runs/sweep"
        args = [
            "sweep",
            "debug.inject_nan_at_step=0,2",
            "rollback.max_retries=0",
            *TINY,
            "ckpt.every=0",
            f"sft.cache_dir={sft_cache}",
            "log.tensorboard=false",
            "--out",
            out,
        ]
        assert main(args) == 0
        fs = fsspec.filesystem("s3", skip_instance_cache=True)
        report = json.loads(fs.cat_file("runs/sweep/sweep.json"))
        page = fs.cat_file("runs/sweep/sweep.html").decode()
        assert fs.exists("runs/sweep/debug.inject_nan_at_step=2/metrics.jsonl")
        assert fs.exists("runs/sweep/debug.inject_nan_at_step=0/model/model.safetensors")  # a normal run directory
    by_name = {t["trial"]: t for t in report["trials"]}
    good, bad = by_name["debug.inject_nan_at_step=0"], by_name["debug.inject_nan_at_step=2"]
    assert report["best"] == "debug.inject_nan_at_step=0" and report["failed"] == 1
    assert good["status"] == "completed" and good["eval_after"] is not None
    assert good["run_dir"] == "s3://runs/sweep/debug.inject_nan_at_step=0" and bad["status"] != "completed"
    assert "<img" in page and "debug.inject_nan_at_step=2" in page  # curves read back from the URL
    assert "best: debug.inject_nan_at_step=0" in capsys.readouterr().err
