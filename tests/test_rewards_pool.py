"""Verification workers: hard wall-clock budget, replacement, no leaked processes, determinism."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from rlvr.records import Problem
from rlvr.rewards import build_reward
from rlvr.config.reward import MathConfig, RewardConfig
from rlvr.rewards.math_verifier import MathVerifier

# answers that reach math-verify and do not come back (power towers and deep nesting are
# refused before that: see test_math_adversarial.py)
PATHOLOGICAL = [r"(x+1)^{10000}", r"\sin(x)^{300} + \cos(x)^{300}"]
BUDGET = 1.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is gone for our purposes once reaped
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(MathConfig(workers=2, timeout_s=BUDGET))
    yield v
    v.close()


def test_pathological_inputs_cost_at_most_the_budget_then_the_pool_recovers(verifier):
    problems = [Problem(id=str(i), prompt="", answer="5") for i in range(len(PATHOLOGICAL))]
    res = verifier.verify(problems, [rf"\boxed{{{p}}}" for p in PATHOLOGICAL])
    for r in res:
        assert not r.valid and r.total == 0.0 and r.components["correct"] == 0.0
        assert r.info["timeout"] and r.info["verify_s"] < BUDGET + 0.5, r.info
    started = verifier.pool.started
    ok = verifier.verify([Problem(id="s", prompt="", answer=r"\frac{\sqrt{2}}{2}")], [r"\boxed{\frac{1}{\sqrt{2}}}"])
    assert ok[0].valid and ok[0].components["correct"] == 1.0
    assert started >= 4  # two originals, two replacements for the killed workers


def test_a_worker_that_dies_mid_task_gives_an_invalid_sample_not_a_crash(verifier):
    verifier.verify([Problem(id="w", prompt="", answer="x")], [r"\boxed{x+1}"])  # make sure workers are up
    slow = MathVerifier(MathConfig(workers=1, timeout_s=30.0))
    try:
        slow.verify([Problem(id="w", prompt="", answer="x")], [r"\boxed{x}"])
        pid = slow.pool.pids[0]
        threading.Timer(0.5, os.kill, (pid, 9)).start()
        res = slow.verify([Problem(id="p", prompt="", answer="5")], [r"\boxed{(x+1)^{10000}}"])
        assert not res[0].valid and "crashed" in res[0].error
        again = slow.verify([Problem(id="q", prompt="", answer="x")], [r"\boxed{2x/2}"])
        assert again[0].valid and again[0].components["correct"] == 1.0
    finally:
        pids = slow.pool.pids
        slow.close()
    assert not any(_alive(p) for p in pids)


def test_scoring_works_off_the_main_thread(verifier):
    # math-verify's own timeout uses SIGALRM and fails outside the main thread
    out = {}
    t = threading.Thread(
        target=lambda: out.update(
            r=verifier.verify([Problem(id="t", prompt="", answer=r"\{1,2\}")], [r"\boxed{\{2,1\}}"])
        )
    )
    t.start()
    t.join(60)
    assert out["r"][0].valid and out["r"][0].components["correct"] == 1.0


def test_same_completion_same_reward_with_fresh_workers():
    problems = [Problem(id=str(i), prompt="", answer=a) for i, a in enumerate(["1/3", "x^2-1", "约为3.14", "7"])]
    texts = [r"\boxed{0.333333}", r"\boxed{(x-1)(x+1)}", r"<answer>\pi</answer>", r"\boxed{7.0}"]
    runs = []
    for _ in range(2):
        with build_reward(RewardConfig(math=MathConfig(workers=1))) as reward:
            runs.append([(r.total, r.components, r.valid) for r in reward.score(problems, texts * 1)])
            runs.append([(r.total, r.components, r.valid) for r in reward.score(problems, texts)])  # warm caches
    assert runs[0] == runs[1] == runs[2] == runs[3]


def test_no_worker_outlives_an_interpreter_that_never_closed_its_pool(tmp_path):
    script = (
        "from rlvr.records import Problem\n"
        "from rlvr.rewards import build_reward\n"
        "r = build_reward()\n"  # no main guard and no close(): both must be fine
        "res = r.score([Problem(id='a', prompt='', answer='x')], ['\\\\boxed{x}'])\n"
        "assert res[0].components['correct'] == 1.0, res\n"
        "print(*r.verifier('math').pool.pids)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def test_configured_tolerance_reaches_the_math_verify_path():
    v = MathVerifier(MathConfig(workers=1, rel_tol=0.001))
    try:
        res = v.verify(
            [Problem(id=str(i), prompt="", answer=r"\{\pi, 1\}") for i in range(2)],
            [r"\boxed{\{3.1416, 1\}}", r"\boxed{\{3.15, 1\}}"],
        )
    finally:
        v.close()
    assert [r.components["correct"] for r in res] == [1.0, 0.0]
    assert all(r.info["path"] == "math-verify" for r in res)


def test_a_worker_killed_while_idle_is_replaced_before_the_next_task():
    v = MathVerifier(MathConfig(workers=1))
    try:
        v.verify([Problem(id="a", prompt="", answer="x")], [r"\boxed{x}"])
        pid = v.pool.pids[0]
        os.kill(pid, 9)
        time.sleep(0.2)
        res = v.verify([Problem(id="b", prompt="", answer="x+1")], [r"\boxed{1+x}"])
        assert res[0].valid and res[0].components["correct"] == 1.0
        assert v.pool.pids != [pid]
    finally:
        v.close()
