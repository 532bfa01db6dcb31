"""Robot control: MuJoCo's InvertedPendulum as a text episode with continuous actions."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, strategies as st

from rlvr.envs import env_class
from rlvr.envs.control import parse_action
from rlvr.tasks.games import PendulumTask, pendulum_teacher


def test_an_action_is_one_number_per_dimension_clipped_to_the_space():
    box = ([-3.0], [3.0])
    assert parse_action("+0.4", *box) == [0.4] and parse_action(" -1.5\n", *box) == [-1.5]
    assert parse_action("7", *box) == [3.0] and parse_action("-12.25", *box) == [-3.0]
    assert parse_action("-0.5 +2", [-1, -1], [1, 1]) == [-0.5, 1.0]
    for text in ("", "left", "nan", "inf", "1e3", "+.5", "0.4 0.1", "0x10", "+-1", "1.", "0.4,", "１"):
        assert parse_action(text, *box) is None, text
    assert parse_action("0.4", [-1, -1], [1, 1]) is None  # one number for a 2-D action


@given(st.text(max_size=40))
def test_any_turn_parses_to_an_action_in_the_box_or_to_none(text):
    action = parse_action(text, [-3.0, -1.0], [3.0, 1.0])
    assert action is None or (
        len(action) == 2 and all(math.isfinite(a) for a in action) and -3 <= action[0] <= 3 and -1 <= action[1] <= 1
    )


def test_the_pendulum_episode_reports_balance_success_and_invalid_turns():
    held = PendulumTask(eval_size=3).held_out()
    assert len({p.metadata["seed"] for p in held}) == 3 and held[0].prompt.startswith("a")
    env = env_class("inverted_pendulum")(max_turns=40)
    assert env.reset(held[0], held[0].metadata["seed"]) == held[0].prompt
    total = {"balance": 0.0, "success": 0.0, "invalid_action": 0.0}
    for turn in range(40):
        r = env.step("+3.0" if turn % 2 else "push")  # full force one way, the zero action between
        for k in total:
            total[k] += r.components[k]
        if r.done:
            break
    env.close()
    assert r.done and not r.info["success"] and turn < 39  # kicked over: +1 for each step but the one it fell on
    assert total["balance"] == pytest.approx(turn / 40) and total["success"] == 0 and total["invalid_action"] < 0
    # the teacher balances every held-out start; pushing the wrong way (its misconception) it topples
    for p in held:
        demo = pendulum_teacher(p, 0.0, random.Random(0))
        assert sum(1 for _, sampled in demo if sampled) == 40
        assert sum(1 for _, sampled in pendulum_teacher(p, 1.0, random.Random(0)) if sampled) < 40
