import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.config import Config, load_config
from rlvr.configlib import ConfigError


def test_defaults_and_overrides():
    cfg = load_config(None, ["rollout.group_size=4", "train.lr=5e-4", "task.ops=['+','-']", "algo.dual_clip=3"])
    assert isinstance(cfg, Config)
    assert cfg.rollout.group_size == 4
    assert cfg.train.lr == pytest.approx(5e-4)  # YAML 1.1 reads 5e-4 as a string; still a number here
    assert cfg.task.ops == ["+", "-"]
    assert cfg.algo.dual_clip == 3.0


@pytest.mark.parametrize(
    "override, key, hint",
    [
        ("rollout.group_size=oops", "rollout.group_size", "integer"),
        ("no.such.key=1", "no.such.key", "unknown key"),
        ("rollout.nope=1", "rollout.nope", "group_size"),  # lists the allowed keys
        ("algo.loss_type=ppo", "algo.loss_type", "'token_mean'"),
        ("rollout.group_size=1", "rollout.group_size", ">= 2"),
        ("train.lr=-1", "train.lr", "> 0"),
        ("run.progress=maybe", "run.progress", "true or false"),
        ("rollout=3", "rollout", "mapping"),
        ("reward.format.pattern=x", "reward.format.pattern", "kind=regex only"),  # read by another kind: no effect
        ("reward.format.json_schema=s.json", "reward.format.json_schema", "kind=json only"),
        ("reward.format.kind=regex", "reward.format.kind", "needs reward.format.pattern"),
        ("eval.n=0", "eval.n", ">= 1"),  # it divided by zero after the whole run
        ("env.python=/usr/bin/python3", "env.python", "env.name=verifiers:<id>"),
    ],
)
def test_bad_values_name_the_key(override, key, hint):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    message = str(err.value)
    assert message.startswith(key + ":"), message
    assert hint in message


def test_yaml_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  group_size: [1\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    good = tmp_path / "good.yaml"
    good.write_text("rollout:\n  group_size: 6\ntrain:\n  steps: 7\n")
    cfg = load_config(good, ["train.steps=9"])  # overrides win over the file
    assert (cfg.rollout.group_size, cfg.train.steps) == (6, 9)


@pytest.mark.parametrize(
    "override, key", [("rollout.group_size=oops", "rollout.group_size"), ("no.such.key=1", "no.such.key")]
)
def test_cli_fails_before_any_work(tmp_path, override, key):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "train", f"run.dir={run_dir}", override],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], proc.stderr
    assert not run_dir.exists()  # nothing was started


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_shipped_config_loads(path):
    load_config(path)  # every key is known and every value passes validation


def test_a_token_budget_and_a_sequence_count_cannot_both_size_micro_batches():
    assert load_config(None, ["train.micro_batch_tokens=2048"]).train.micro_batch_tokens == 2048
    with pytest.raises(ConfigError, match="train.micro_batch_tokens.*set train.micro_batch_size=0"):
        load_config(None, ["train.micro_batch_tokens=2048", "train.micro_batch_size=4"])
