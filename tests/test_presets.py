"""Every preset in configs/ runs a few steps on a tiny model with finite metrics.

Whether a preset *improves* reward is measured by the full runs in the README
table; here each one must run, report what it changes, and touch only `algo`.
"""

import json
import math
from pathlib import Path

import pytest
import yaml

import rlvr.assembly.parts as parts
from rlvr.config import load_config
from rlvr.assembly import train

Reference = parts.ReferenceModel

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ["grpo", "dapo", "dr_grpo", "gspo", "rloo"]
TINY = [
    "model.tiny_hidden=32",
    "model.tiny_layers=2",
    "model.tiny_heads=2",
    "task.min_digits=1",
    "task.max_digits=1",
    "sft.steps=150",
    "sft.batch_size=32",
    "sft.examples=2000",
    "rollout.batch_size=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=24",
    "train.steps=2",
    "eval.n=8",
    "eval.every=0",
    "ckpt.every=0",
    "run.progress=false",
    "log.tensorboard=false",
    "train.threads=1",
]
FINITE_EVERY_STEP = [
    "reward/mean",
    "rollout/zero_std_frac",
    "rollout/extra_rounds",
    "rollout/shortfall_groups",
    "rollout/len_p90",
    "rollout/recommended_max_tokens",
    "rollout/truncated_frac",
    "rollout/masked_truncated_frac",
    "reward/overlong_penalty_mean",
    "reward/kl_penalty_mean",
    "actor/zero_std_groups_in_update",
]
FINITE_WHEN_UPDATED = [
    "actor/loss",
    "actor/kl",
    "actor/entropy",
    "actor/clip_frac",
    "actor/grad_norm",
    "actor/ratio_min",
    "actor/ratio_mean",
    "actor/ratio_max",
    "actor/skipped_updates",
]


@pytest.fixture(scope="module")
def sft_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("sft-cache")


@pytest.mark.parametrize("name", PRESETS)
def test_preset_sets_only_algorithm_keys(name):
    data = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    assert list(data) == ["algo"], "presets follow the default run for everything but the algorithm"
    load_config(ROOT / "configs" / f"{name}.yaml")  # and every key is valid


def test_readme_documents_every_preset():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Algorithms", 1)[1].split("\n## ", 1)[0]
    for name in PRESETS:
        assert f"configs/{name}.yaml" in section
        assert "arXiv" in section


@pytest.mark.parametrize("name", PRESETS)
def test_preset_runs_on_a_tiny_model(name, tmp_path, sft_cache, monkeypatch):
    references = []
    monkeypatch.setattr(parts, "ReferenceModel", lambda *a, **k: references.append(1) or Reference(*a, **k))
    cfg = load_config(
        ROOT / "configs" / f"{name}.yaml", TINY + [f"run.dir={tmp_path / 'run'}", f"sft.cache_dir={sft_cache}"]
    )
    summary = train(cfg)
    assert summary["status"] == "completed" and summary["steps"] == 2
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 2
    for r in steps:
        for key in FINITE_EVERY_STEP + (FINITE_WHEN_UPDATED if r["rollout/shortfall_groups"] < 4 else []):
            assert key in r and math.isfinite(r[key]), (key, r.get(key))
        assert r.get("actor/skipped_updates", 0.0) == 0
    assert len(references) == (1 if cfg.algo.beta > 0 else 0)  # beta = 0 loads no reference model
    updated = [r for r in steps if "actor/loss" in r]
    assert updated, "no step updated the policy"
    if cfg.algo.filter_zero_std:
        assert all(r["actor/zero_std_groups_in_update"] == 0 for r in steps)
    if cfg.algo.beta > 0:
        assert any(r["actor/kl"] > 0 for r in updated)  # the policy moved away from the reference
    if cfg.algo.kl_in_reward:
        assert any(r["reward/kl_penalty_mean"] != 0 for r in steps)
    if cfg.algo.overlong_buffer:
        assert any(r["reward/overlong_penalty_mean"] < 0 for r in steps)
