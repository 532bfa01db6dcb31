"""A verifiers environment written with its public API (`vf.SingleTurnEnv`, `vf.Rubric`): sums to
complete, the rubric's `exact` (the answer's digits, weight 1) and `brief` (a short reply, weight 0.2).
Loaded by rlvr as env.name=verifiers:vf_arith (tests/test_verifiers_hub.py)."""

from __future__ import annotations

import random

import verifiers as vf
from datasets import Dataset


def _rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    pairs = [(rng.randint(1, 9), rng.randint(1, 9)) for _ in range(n)]
    return [{"question": f"{a}+{b}=", "answer": str(a + b)} for a, b in pairs]


def _text(completion) -> str:
    if isinstance(completion, list):
        return str(completion[-1].get("content") or "") if completion else ""
    return str(completion)


def exact(completion, answer) -> float:
    text = _text(completion)
    return 1.0 if "".join(c for c in text if c.isdigit()) == answer else 0.0


def brief(completion) -> float:
    text = _text(completion)
    return 1.0 / (1.0 + len(text))


class FlakyInfra(vf.SingleTurnEnv):
    """Its infrastructure fails on every odd example (an error of verifiers' own, not the policy's)."""

    async def get_model_response(self, state, prompt, **kwargs):
        if state["example_id"] % 2:
            raise vf.InfraError("sandbox unreachable")
        return await super().get_model_response(state, prompt, **kwargs)


def correct(completion, answer) -> float:
    """`exact` under a name rlvr keeps for its own component (load_environment(clash=True))."""
    return exact(completion, answer)


def load_environment(n: int = 64, seed: int = 0, flaky: bool = False, clash: bool = False) -> vf.Environment:
    rubric = vf.Rubric(funcs=[correct if clash else exact, brief], weights=[1.0, 0.2])
    return (FlakyInfra if flaky else vf.SingleTurnEnv)(
        dataset=Dataset.from_list(_rows(n, seed)), eval_dataset=Dataset.from_list(_rows(16, seed + 1)), rubric=rubric
    )
