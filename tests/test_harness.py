"""A user's environment can never take a run down: every way an environment can go wrong (raise in
each method, return the wrong shape or a non-finite number, hang, spin, flood, exit) costs only its
own episode, which is marked, counted and never rewarded; each case bounded in time from outside."""

from __future__ import annotations

import concurrent.futures as cf
import math
import os
import time

import hostile
import pytest

from rlvr.envs.checks import Limits
from rlvr.envs.faults import EnvironmentBroken, FaultLedger
from rlvr.envs.host import ProcessHost, ThreadHost
from rlvr.records import Problem
from rlvr.rewards import build_reward
from rlvr.rewards.compose import env_kwargs
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import EpisodeSpec, run_episodes
from rlvr.train.metrics import env_error_metrics, rollout_metrics

PARAMS = SamplingParams(group_size=2, max_new_tokens=8)
EXPECTED = {  # behaviour -> (kind of failure, the method named), None: the episode is fine
    "ok": None,
    "flood": None,
    "surrogate": None,
    "init_raise": ("raised", "make_hostile.__init__ raised ZeroDivisionError"),
    "reset_raise": ("raised", "Hostile.reset"),
    "step_raise": ("raised", "Hostile.step"),
    "close_raise": ("raised", "Hostile.close"),
    "reset_hang": ("timeout", "make_hostile.reset did not answer within 2 s"),
    "step_hang": ("timeout", "Hostile.step"),
    "step_spin": ("timeout", "Hostile.step"),
    "exit": ("exit", "Hostile.step"),
    "tuple": ("bad_result", "Hostile.step returned a tuple"),
    "none": ("bad_result", "Hostile.step returned None"),
    "nan": ("bad_result", "component 'score' is nan"),
    "inf": ("bad_result", "component 'score' is inf"),
    "str_component": ("bad_result", "components are str -> finite number"),
    "info_none": ("bad_result", "info is None"),
    "done_array": ("bad_result", "done is"),
    "messages_str": ("bad_result", "messages is a str"),
    "reset_int": ("bad_result", "Hostile.reset returned a int"),
    "return_nan": ("bad_result", "info['return']"),
}


class Scripted:
    """A stand-in sampler that writes the same short turn every time (the environments are under test)."""

    def __init__(self, text: str = "42") -> None:
        from rlvr.models.tiny import build_tokenizer

        self.tokenizer, self.version = build_tokenizer(), 0
        self.ids = self.tokenizer(text, add_special_tokens=False).input_ids

    def sample(self, contexts, params, group_size):
        eos = self.tokenizer.eos_token_id
        return [(self.ids + [eos], [-0.5] * (len(self.ids) + 1), "stop") for _ in contexts for _ in range(group_size)]


def bounded(seconds: float, fn, *args, **kwargs):
    """fn(*args) must return within `seconds` (a hang fails the test instead of stalling the suite)."""
    pool = cf.ThreadPoolExecutor(1)
    try:
        return pool.submit(fn, *args, **kwargs).result(timeout=seconds)
    finally:
        pool.shutdown(wait=False)


def spec(host, **kwargs) -> EpisodeSpec:
    # deadlines that a well-behaved call meets even on a loaded 2-core machine, beside spinning neighbours
    settings = {
        "max_turns": 2,
        "reset_timeout_s": 2.0,
        "step_timeout_s": 2.0,
        "episode_timeout_s": 30.0,
        "limits": Limits(message_chars=1000),
        "faults": FaultLedger(0),
    } | kwargs
    return EpisodeSpec(hostile.make_hostile, host=host, **settings)


def problems(names) -> list[Problem]:
    return [Problem(id=name, prompt="1+1=", answer="2", metadata={"do": name}) for name in names]


@pytest.fixture(scope="module")
def sampler():
    return Scripted()


@pytest.mark.parametrize("where", ["process", "thread"])
def test_every_failure_costs_only_its_own_episode(sampler, where):
    host = ProcessHost(2) if where == "process" else ThreadHost()
    names = [n for n in EXPECTED if where == "process" or n != "step_spin"]  # a spinning thread cannot be stopped
    t0 = time.monotonic()
    out = bounded(30, run_episodes, sampler, problems(names), PARAMS, spec(host))
    took = time.monotonic() - t0
    assert took < 15, took  # one reset deadline and one step deadline, not a wait per hang
    for c in out:
        expected = EXPECTED[c.problem_id]
        if expected is None:
            assert "env_error" not in c.env_info, c.env_info
            assert c.finish_reason in ("env_done", "max_turns") and sum(t.role == "assistant" for t in c.turns) == 2
        else:
            kind, named = expected
            assert c.env_info.get("env_error") == kind and named in c.env_info["error"], (c.problem_id, c.env_info)
            assert c.finish_reason == "env_done"
    assert all(c.prompt_ids for c in out)  # an environment that never answered its reset: the problem's prompt
    flood = next(c for c in out if c.problem_id == "flood")
    said = flood.turns[1].info["messages"][0]["content"]
    assert len(said) < 1100 and "more characters cut" in said  # cut before it was tokenised
    surrogate = next(c for c in out if c.problem_id == "surrogate")
    assert "\udc80" not in surrogate.turns[1].info["messages"][0]["content"]
    # the reward never credits a failed episode; the metrics count them, by kind, and nothing is NaN
    reward = build_reward(None, {"score": 1.0})
    results = reward.score(
        [p for p in problems(names) for _ in range(2)],
        [c.text for c in out],
        [c.group_id for c in out],
        **env_kwargs(out),
    )
    assert [r.valid for r in results] == [EXPECTED[c.problem_id] is None for c in out]
    assert all(r.total == 0.0 for r in results if not r.valid)
    import torch

    metrics = rollout_metrics(out, torch.tensor([r.total for r in results]), 2)
    assert all(math.isfinite(v) for v in metrics.values())
    failed = sum(e is not None for e in map(EXPECTED.get, names)) / len(names)
    assert metrics["rollout/env_error_frac"] == pytest.approx(failed)
    assert metrics["rollout/env_error/timeout_frac"] == pytest.approx((2 + (where == "process")) / len(names))
    host.shutdown()


def test_a_hung_worker_is_killed_and_a_dead_one_replaced(sampler):
    import psutil

    host = ProcessHost(2)
    episodes = spec(host)
    bounded(30, run_episodes, sampler, problems(["ok"]), PARAMS, episodes)
    first = {w.pid for w in host._workers}
    out = bounded(30, run_episodes, sampler, problems(["step_spin", "ok"]), PARAMS, episodes)
    assert {c.env_info.get("env_error") for c in out} == {"timeout", None}
    # both hosted a spinning episode: killed with it, and replaced at once (for the next rollout)
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in first)
    me = psutil.Process()
    workers = {p.pid for p in me.children(recursive=True) if "rlvr.harness.worker" in " ".join(p.cmdline())}
    assert workers == {w.pid for w in host._workers} and len(workers) == 2 and not workers & first
    # a worker that exits (os._exit) fails the episodes it hosted, and the next rollout gets a fresh one
    out = bounded(30, run_episodes, sampler, problems(["os_exit"]), PARAMS, episodes)
    assert {c.env_info["env_error"] for c in out} == {"died"} and "exited with code 3" in out[0].env_info["error"]
    out = bounded(30, run_episodes, sampler, problems(["ok"]), PARAMS, episodes)
    assert all("env_error" not in c.env_info for c in out)
    host.shutdown()


def test_an_environment_wrong_on_every_episode_stops_the_run_with_one_line():
    from rlvr.rollout.episodes import EpisodeSpec

    episodes = EpisodeSpec(
        lambda p: hostile.AlwaysTuple(), max_turns=2, host=ProcessHost(1), faults=FaultLedger(4), step_timeout_s=5.0
    )
    with pytest.raises(EnvironmentBroken) as err:
        bounded(30, run_episodes, Scripted(), problems(["a", "b", "c"]), PARAMS, episodes)
    message = str(err.value)
    assert message.startswith("AlwaysTuple.step returned a tuple") and "rlvr.envs.StepResult" in message
    assert "\n" not in message and "first 4 episodes" in message
    episodes.host.shutdown()


def test_env_error_metrics_are_absent_for_plain_single_turn_rollouts(sampler):
    from rlvr.rollout.episodes import SINGLE_TURN

    out = run_episodes(sampler, problems(["ok"]), PARAMS, SINGLE_TURN)
    assert env_error_metrics(out) == {}


def test_a_process_host_costs_little_per_call(sampler):
    """The overhead is measured in bench/bench_env_isolation.py; here only that the workers are reused."""
    host = ProcessHost(2)
    episodes = spec(host)
    run_episodes(sampler, problems(["ok"] * 4), PARAMS, episodes)
    pids = {w.pid for w in host._workers}
    run_episodes(sampler, problems(["ok"] * 4), PARAMS, episodes)
    assert {w.pid for w in host._workers} == pids and all(os.path.exists(f"/proc/{p}") for p in pids)
    host.shutdown()


@pytest.mark.slow
def test_a_run_with_a_flaky_environment_completes_with_its_failures_counted(tiny_overrides):
    """Raises on a third of the episodes, hangs on a tenth, a NaN component on another tenth: the run
    completes and exits 0; each failure is counted and invalid, and no metric is NaN. (Its time
    beside a well-behaved twin: bench/bench_env_faults.py.)"""
    import json

    from rlvr.cli import main

    overrides = tiny_overrides + ["env.name=hostile:Flaky", "env.step_timeout_s=1", "train.steps=4", "ckpt.every=0"]
    assert bounded(300, main, ["train", *overrides]) == 0
    run = next(o.split("=", 1)[1] for o in overrides if o.startswith("run.dir="))
    summary = json.loads(open(f"{run}/summary.json").read())
    assert summary["status"] == "completed" and summary["steps"] == 4
    rows = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
    steps = [r for r in rows if "rollout/env_error_frac" in r]
    assert len(steps) == 4 and all(math.isfinite(v) for r in rows for v in r.values() if isinstance(v, float))
    assert all(r["reward/invalid_frac"] == r["rollout/env_error_frac"] for r in steps)
    kinds = {k.split("/")[2] for r in steps for k in r if k.startswith("rollout/env_error/")}
    assert kinds == {"raised_frac", "timeout_frac", "bad_result_frac"}, kinds
    events = [json.loads(line) for line in open(f"{run}/events.jsonl")]
    errors = {e for ev in events if ev["kind"] == "invalid_samples" for e in ev["errors"]}
    assert any("Flaky.step raised KeyError" in e for e in errors) and any("nan" in e for e in errors)


def test_user_code_calling_sys_exit_in_the_trainer_fails_the_run(tiny_overrides, capsys):
    from rlvr.cli import main

    overrides = tiny_overrides + [
        "reward.process.scorer=hostile:exiting_scorer",
        "reward.weights.process=0.1",
        "train.steps=2",
        "ckpt.every=0",
    ]
    assert main(["train", *overrides]) == 1  # it exits in the evaluation before the first step
    assert "failed: sys.exit(0) was called by user code" in capsys.readouterr().err
    assert (
        main(["train", *tiny_overrides, "env.name=hostile_import_exit:Env"]) == 2
    )  # exiting on import: a config error
