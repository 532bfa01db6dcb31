"""`rlvr data audit` reads what training reads, and its `invalid` verdicts are exactly what training skips."""

from __future__ import annotations

import json

from rlvr.cli import main
from rlvr.tasks.files import load_problems

ADD = {
    "type": "function",
    "entry_point": "add",
    "cases": [{"args": [1, 2], "expected": 3}, {"args": [2, 2], "expected": 4}],
}
ADD_OK = "```python\ndef add(a, b):\n    return a + b\n```"
ADD_WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
NONE_TEST = {"type": "function", "entry_point": "f", "cases": [{"args": [1], "expected": None}]}  # checks nothing
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 6 x 7?"}]


def test_audit_and_training_agree_on_mixed_formats(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = tmp_path / "mixed.jsonl"
    lines = [
        {"id": "chat", "messages": CHAT, "answer": "42"},  # valid chat record
        {
            "id": "chat-sol",
            "messages": [
                CHAT[0],
                {"role": "user", "content": "What is 6 x 8?"},
                {"role": "assistant", "content": r"6 x 8 = 48, \boxed{48}"},
            ],
            "answer": "48",
        },  # valid, with its solution
        {"id": "code", "prompt": "Write add(a, b).", "tests": ADD, "solution": ADD_OK},  # tests only: code, valid
        {"id": "code-bad-ref", "prompt": "Write add.", "tests": ADD, "solution": ADD_WRONG},  # reference fails
        {"id": "code-empty-tests", "prompt": "Write f.", "tests": NONE_TEST},  # accepts a no-op
        {"id": "wrong-sol", "prompt": "12+345=", "answer": "357", "solution": r"12+345 = 358, \boxed{358}"},
        "{not json",  # invalid
        {"id": "no-gold", "prompt": "What?"},  # invalid: no answer
        {"id": "chat", "prompt": "dup id", "answer": "1"},  # invalid: duplicate id
        {"id": "bad-role", "messages": [{"role": "robot", "content": "hi"}], "answer": "1"},  # invalid
        {
            "id": "two-sols",
            "messages": [*CHAT, {"role": "assistant", "content": "42"}],
            "answer": "42",
            "solution": "42",
        },  # invalid: twice
    ]
    jsonl.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    parquet = tmp_path / "more.parquet"
    rows = [
        {"id": "pq-ok", "prompt": "2+2=", "answer": "4", "tests": None},
        {"id": "pq-code", "prompt": "Write add(x, y).", "answer": None, "tests": json.dumps(ADD)},  # tests as JSON text
        {"id": "pq-empty", "prompt": "  ", "answer": "4", "tests": None},  # invalid: empty prompt
        {"id": "pq-bad-tests", "prompt": "Write g.", "answer": None, "tests": "{oops"},
    ]  # invalid: tests
    pq.write_table(pa.Table.from_pylist(rows), parquet)

    skipped = []
    trained = load_problems([jsonl, parquet], "skip", lambda kind, **f: skipped.append(f["where"]))
    assert main(["data", "audit", str(jsonl), str(parquet)]) == 1
    out = capsys.readouterr().out
    by_where: dict[str, list[str]] = {}
    for line in out.splitlines():
        for where in [f"{jsonl}:{n}" for n in range(1, 12)] + [f"{parquet}: row {n}" for n in range(1, 5)]:
            if line.startswith(where + ": "):
                by_where.setdefault(where, []).append(line[len(where) + 2 :])
    invalid = sorted(w for w, msgs in by_where.items() if any(m.startswith("invalid: ") for m in msgs))
    assert invalid == sorted(skipped)  # the audit's invalid records are exactly the ones training skips
    assert len(skipped) == 7 and len(trained) == 8
    assert not {f"{jsonl}:1", f"{jsonl}:2", f"{jsonl}:3", f"{parquet}: row 1", f"{parquet}: row 2"} & set(by_where), out
    assert "reference solution fails its own tests" in by_where[f"{jsonl}:4"][0]
    assert "does nothing" in by_where[f"{jsonl}:5"][0]
    assert "mislabelled gold" in by_where[f"{jsonl}:6"][0]
    assert "8 usable record(s), 7 invalid" in out
