"""OpenEnv environments (openenv-core, in process, no container) as rlvr episodes: the policy's turn
becomes the action's text, the observation the next message, the rewards the `env` component; the
environment runs in a worker process as any user code does."""

from __future__ import annotations

import random

import pytest
from helpers import checked_config
from test_harness import Scripted, bounded

from rlvr.assembly import episode_spec
from rlvr.config import load_config
from rlvr.configlib import ConfigError
from rlvr.envs.host import ProcessHost
from rlvr.records import Problem
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import run_episodes

pytest.importorskip("openenv")
GUESS = [
    "env.name=openenv",
    "env.settings.environment=openenv_guess:GuessEnv",
    "env.settings.action=openenv_guess:GuessAction",
    "env.max_turns=4",
]


def test_an_openenv_environment_runs_as_an_episode_in_a_worker():
    spec = episode_spec(load_config(None, GUESS))
    assert isinstance(spec.host, ProcessHost)  # user code: contained
    problems = [Problem(id=f"g{k}", prompt="", metadata={"seed": k}) for k in range(12)]
    out = bounded(60, run_episodes, Scripted("7"), problems, SamplingParams(group_size=1, max_new_tokens=4), spec)
    spec.host.shutdown()
    for p, c in zip(problems, out):
        won = random.Random(p.metadata["seed"]).randint(1, 10) == 7
        assert "env_error" not in c.env_info, c.env_info
        assert c.env_components == {"env": 1.0 if won else 0.0} and c.env_info["success"] == won
        said = [t.info["messages"][0]["content"] for t in c.turns if t.role == "env"]
        assert len(said) == (0 if won else 3) and set(said) <= {"higher", "lower"}
    assert {c.env_info["success"] for c in out} == {True, False}


def test_constructor_arguments_from_settings_and_a_reset_without_seed():
    """env.settings.args build the environment; a reset that takes no seed is called without one.
    (WideGuessEnv needs both: without its arguments, or given a seed, the episode would fail.)"""
    wide = [*GUESS, "env.settings.environment=openenv_guess:WideGuessEnv"]
    problem, params = [Problem(id="g", prompt="")], SamplingParams(group_size=1, max_new_tokens=4)
    for args, expected in (("{high: 1, rng_seed: 5}", None), ("7", "env.settings.args")):
        spec = episode_spec(load_config(None, [*wide, f"env.settings.args={args}"]))
        out = run_episodes(Scripted("1"), problem, params, spec)
        spec.host.shutdown()
        if expected is None:
            assert "env_error" not in out[0].env_info and out[0].env_info["success"], out[0].env_info
        else:
            assert expected in out[0].env_info["error"]


def test_an_action_with_two_text_fields_needs_the_one_named():
    spec = episode_spec(load_config(None, [*GUESS[:2], "env.settings.action=openenv_guess:TwoTexts"]))
    out = run_episodes(
        Scripted("7"), [Problem(id="g", prompt="")], SamplingParams(group_size=1, max_new_tokens=4), spec
    )
    spec.host.shutdown()
    assert "name the one the policy's turn fills" in out[0].env_info["error"]
    with pytest.raises(ConfigError, match="reads no setting"):
        checked_config(None, [*GUESS, "env.settings.oops=1"])
