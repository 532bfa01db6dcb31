"""Learning-rate schedules against hand-computed values, and the schedule a GRPO run really used."""

import math

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.train.lr import lr_factor


def test_constant_schedule_with_warmup():
    assert [lr_factor(s, total=10, warmup=4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_linear_and_cosine_decay_to_the_floor_after_warmup():
    # 2 warmup steps, then 8 decay steps: t = (s - 2) / 8
    assert lr_factor(2, total=10, warmup=2, schedule="linear") == 1.0
    assert lr_factor(6, total=10, warmup=2, schedule="linear") == pytest.approx(0.5)
    assert lr_factor(10, total=10, warmup=2, schedule="linear", min_ratio=0.1) == pytest.approx(0.1)
    assert lr_factor(4, total=10, warmup=2, schedule="cosine") == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_factor(6, total=10, warmup=2, schedule="cosine", min_ratio=0.2) == pytest.approx(0.2 + 0.8 * 0.5)
    assert lr_factor(50, total=10, schedule="cosine") == pytest.approx(0.0)  # past the end: stays at the floor


def test_bad_min_lr_ratio_names_the_key():
    with pytest.raises(ConfigError, match="train.min_lr_ratio"):
        load_config(None, ["train.min_lr_ratio=1.5"])
    with pytest.raises(ConfigError, match="train.lr_schedule"):
        load_config(None, ["train.lr_schedule=step"])


def test_grpo_run_follows_the_configured_schedule(tiny_overrides, tmp_path):
    import json

    import torch

    from rlvr.assembly import train

    threads = torch.get_num_threads()
    try:
        cfg = load_config(
            None,
            tiny_overrides
            + [
                "train.lr_schedule=linear",
                "train.lr=0.003",
                "ckpt.every=0",
                "log.report=false",
                "log.tensorboard=false",
            ],
        )
        assert train(cfg)["status"] == "completed"
    finally:
        torch.set_num_threads(threads)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["actor/lr"] for r in rows if "actor/lr" in r]
    # each step logs the rate its update used: 3 steps decaying linearly towards 0
    assert lrs == pytest.approx([0.003, 0.002, 0.001])
