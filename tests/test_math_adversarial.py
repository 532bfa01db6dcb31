"""The math verifier against a labelled adversarial set (tests/data/math_adversarial.jsonl).

Each line is a completion written the way a reward-hacking policy writes, or a right answer
in a form a careless verifier refuses, with the verdict it must get: hedges (several
candidates), injections (relations, negations, words after the value, text aimed at the
grader), equivalence traps (look equal, are not), equivalences that must hold (units,
percent, notations, repeating decimals), format tricks, resource attacks (200 KB completions;
`repeat` builds them: head + unit * times + tail), and what stands around the final answer
(`context`: operators, scale words, units and percent signs attached to a box, hedges and
retractions after it, markers that disagree, a quoted box the completion rejects). English and Chinese. Acceptance: no false
positive, at most 1% false negatives, and every completion judged within its budget.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from rlvr.records import Problem
from rlvr.config.reward import MathConfig
from rlvr.rewards.math_verifier import MathVerifier

DATA = Path(__file__).parent / "data" / "math_adversarial.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def completion(row: dict) -> str:
    if "repeat" in row:
        head, unit, times, tail = row["repeat"]
        return head + unit * times + tail
    return row["completion"]


@pytest.fixture(scope="module")
def verdicts():
    verifier = MathVerifier(MathConfig())
    problems = [Problem(id=r["id"], prompt=r.get("prompt", ""), answer=r["answer"]) for r in ROWS]
    try:
        yield verifier.verify(problems, [completion(r) for r in ROWS])
    finally:
        verifier.close()


def test_the_set_is_large_and_covers_every_class_in_both_languages():
    assert len(ROWS) >= 150 and len({r["id"] for r in ROWS}) == len(ROWS)
    classes = Counter(r["class"] for r in ROWS)
    assert set(classes) == {"hedge", "injection", "trap", "equivalence", "format", "resource", "context"}
    assert all(n >= 10 for n in classes.values()), classes
    for lang in ("en", "zh"):
        assert sum(r["lang"] == lang for r in ROWS) >= 30
    assert sum(r["expected"] for r in ROWS) >= 50 and sum(not r["expected"] for r in ROWS) >= 50
    assert max(len(completion(r)) for r in ROWS) >= 200_000  # resource attacks at full size


def test_no_false_positive_and_at_most_one_percent_false_negatives(verdicts):
    table: dict[str, Counter] = defaultdict(Counter)
    wrong = []
    for row, r in zip(ROWS, verdicts):
        credited = r.valid and r.components["correct"] == 1.0
        table[row["class"]]["n"] += 1
        if credited != bool(row["expected"]):
            kind = "FP" if credited else "FN"
            table[row["class"]][kind] += 1
            wrong.append(
                (kind, row["id"], row["why"], row["answer"], completion(row)[:80], r.info.get("flag"), r.error)
            )
    fp = sum(t["FP"] for t in table.values())
    fn = sum(t["FN"] for t in table.values())
    print({c: dict(t) for c, t in table.items()})
    assert fp == 0, wrong
    assert fn <= len(ROWS) // 100, wrong


def test_every_completion_is_judged_within_its_budget(verdicts):
    """No verdict came from the budget running out: the resource attacks are refused by
    the linear extraction and the answer checks, not by the worker being killed."""
    assert all(r.valid for r in verdicts), [(row["id"], r.error) for row, r in zip(ROWS, verdicts) if not r.valid]
