"""Prime Intellect's `verifiers` environments (tests/vf_arith.py, written with its public API) trained
by rlvr: the environment's dataset is the task, its own rollout runs against rlvr's policy through the
agent endpoint, its rubric's functions are reward components, and what goes wrong is contained."""

from __future__ import annotations

import json

import pytest
from helpers import checked_config
from test_harness import Scripted

from rlvr.assembly import episode_spec
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.configlib import ConfigError
from rlvr.envs import verifiers_hub
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import run_episodes

pytest.importorskip("verifiers")
TINY = [
    "model.tiny_hidden=32",
    "model.tiny_layers=2",
    "model.tiny_heads=2",
    "rollout.batch_size=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=8",
    "eval.n=4",
    "eval.every=0",
    "ckpt.every=0",
    "run.progress=false",
    "log.tensorboard=false",
    "log.report=false",
]
HUB = ["env.name=verifiers:vf_arith", "task.name=verifiers"]


def test_a_verifiers_environment_trains_with_its_rubric_as_components(tmp_path):
    assert main(["train", *HUB, *TINY, "train.steps=2", f"run.dir={tmp_path / 'run'}"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout/env_error_frac" in r]
    assert len(steps) == 2
    for r in steps:
        assert r["rollout/env_error_frac"] == 0.0 and r["rollout/tokens"] > 0
        assert {"reward/exact/mean", "reward/brief/mean"} <= set(r)
        # `correct` is the rubric's reward: its weighted sum (exact 1.0, brief 0.2) over the same samples
        assert r["reward/correct/mean"] == pytest.approx(r["reward/exact/mean"] + 0.2 * r["reward/brief/mean"])
    assert any(r["reward/brief/std"] > 0 for r in steps)  # the policy's replies differ: a gradient to follow


def test_an_environment_error_fails_its_episode_and_the_policy_s_own_errors_are_samples():
    """Odd examples hit verifiers' InfraError: those episodes are invalid and counted; an empty reply
    (EmptyModelResponseError, the untrained policy's) is a sample scored by the rubric."""
    cfg = load_config(None, [*HUB, "env.settings.flaky=true", "env.fail_fast=0"])
    spec = episode_spec(cfg)
    problems, _ = verifiers_hub.problems(cfg.env, chat=False)
    problems = problems[:6]
    sampler = Scripted("")  # every reply empty
    try:
        out = run_episodes(sampler, problems, SamplingParams(group_size=1, max_new_tokens=4), spec)
    finally:
        spec.host.shutdown()
    for p, c in zip(problems, out):
        odd = p.metadata["verifiers_row"]["example_id"] % 2
        assert ("InfraError: sandbox unreachable" in c.env_info.get("error", "")) == bool(odd), c.env_info
        if not odd:
            assert c.env_info["return"] == pytest.approx(0.2) and c.env_components["exact"] == 0.0


def test_a_verifiers_environment_needs_its_task_and_loads_contained():
    with pytest.raises(ConfigError, match="set task.name=verifiers"):
        checked_config(None, [HUB[0]])
    with pytest.raises(ConfigError, match="set env.name=verifiers:<id>"):
        checked_config(None, [HUB[1]])
    with pytest.raises(ConfigError, match="'no_such_env' did not load"):
        checked_config(None, ["env.name=verifiers:no_such_env", HUB[1]])
    with pytest.raises(ConfigError, match="'vf_arith' did not load .*unexpected keyword"):
        checked_config(None, [*HUB, "env.settings.oops=1"])
    with pytest.raises(ConfigError, match=r"functions \['correct'\] would replace rlvr's components"):
        checked_config(None, [*HUB, "env.settings.clash=true"])
    with pytest.raises(ConfigError, match=r"unknown component\(s\) \['nope'\]"):
        checked_config(None, [*HUB, "reward.weights.nope=1"])
    cfg = checked_config(None, [*HUB, "reward.weights.exact=0.5", "env.settings.n=8"])  # load_environment(n=8)
    assert cfg.reward.weights["exact"] == 0.5
