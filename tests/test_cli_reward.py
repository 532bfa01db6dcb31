"""`rlvr reward score` and `rlvr data audit` end to end (in-process, real workers)."""

from __future__ import annotations

import json
import random

from rlvr.cli import main
from rlvr.records import RewardResult
from rlvr.rewards import compose

BUDGET = 1.0


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_score_pathological_file_every_verdict_within_budget(tmp_path, capsys):
    rows = [
        {"completion": "<think>2+5=7</think><answer>357</answer>", "answer": "357", "source": "arith"},
        {"completion": r"\boxed{(x+1)^{10000}}", "answer": "5", "source": "evil"},
        {"completion": r"\boxed{\sin(x)^{300} + \cos(x)^{300}}", "answer": "1", "source": "evil"},
        {"completion": r"\boxed{\frac{1}{\sqrt2}}", "answer": r"\frac{\sqrt2}{2}", "source": "math"},
        {"completion": "def f(): pass", "tests": {"cases": []}, "verifier": "code", "source": "code"},
    ]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    rc = main(["reward", "score", str(src), f"reward.math.timeout_s={BUDGET}", "--out", str(out)])
    assert rc == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [s["source"] for s in scored] == [r["source"] for r in rows]  # input repeated, same order
    assert [s["answer"] for s in scored[:4]] == [r["answer"] for r in rows[:4]]  # the gold is kept
    assert scored[0]["extracted"] == ["357"] and scored[2]["extracted"] == [r"\sin(x)^{300} + \cos(x)^{300}"]
    assert [s["valid"] for s in scored] == [True, False, False, True, False]
    assert [s["components"]["correct"] for s in scored] == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert scored[0]["reward"] == 1.1 and scored[3]["reward"] == 1.0
    assert "exceeded 1 s" in scored[1]["error"] and scored[4]["error"]  # the code verifier says why
    err = capsys.readouterr().err
    assert "evil" in err and "parse_failed" in err  # the per-source summary table


def test_repeat_reports_samples_whose_reward_changed(tmp_path, capsys, monkeypatch):
    src = _write(
        tmp_path / "in.jsonl",
        [{"completion": r"\boxed{2}", "answer": "2"}, {"completion": "x", "answer": "1", "verifier": "dice"}],
    )
    assert main(["reward", "score", str(src), "--repeat", "2"]) == 0
    assert "deterministic" in capsys.readouterr().err

    class Dice:  # a verifier with a bug that makes it non-deterministic
        def verify(self, problems, texts):
            return [RewardResult(total=0.0, components={"correct": random.random()}) for _ in texts]

    monkeypatch.setitem(compose.VERIFIERS, "dice", lambda cfg: Dice())
    assert main(["reward", "score", str(src), "--repeat", "2"]) == 1
    err = capsys.readouterr().err
    assert "in.jsonl:2: reward changed on repeat 2" in err and "in.jsonl:1:" not in err


def test_audit_reports_every_bad_line_and_fails(tmp_path, capsys):
    rows = [
        {"id": "1", "prompt": "12+345=", "answer": "357", "source": "arithmetic"},
        {"id": "2", "prompt": "2+2=", "answer": "5", "source": "arithmetic"},  # mislabelled
        {"id": "3", "prompt": "Area of a unit circle?", "answer": "约为3.14", "source": "zh"},  # fine
        {"id": "4", "prompt": "Half of one?", "answer": r"\frac{1}{2", "source": "math"},  # unparseable
        {"id": "5", "prompt": "12+345=", "answer": "357", "source": "arithmetic"},  # duplicate
        '{"id": "6", "prompt": "broken',  # malformed
        {"id": "7", "prompt": "Clips?", "answer": "70", "solution": "48+24 = 72\n#### 72", "source": "gsm8k"},
        {"id": "8", "prompt": "", "answer": "1", "source": "gsm8k"},  # empty field
    ]
    src = _write(tmp_path / "data.jsonl", rows)
    assert main(["data", "audit", str(src)]) == 1
    out = capsys.readouterr().out
    lines = {
        int(line.split(":")[1]): line
        for line in out.splitlines()
        if line.startswith(str(src) + ":") and line.split(":")[1].isdigit()
    }
    assert sorted(lines) == [2, 4, 5, 6, 7, 8]
    assert "mislabelled" in lines[2] and "does not parse" in lines[4] and "duplicate prompt" in lines[5]
    assert "invalid: not valid JSON" in lines[6] and "mislabelled" in lines[7]
    assert "invalid: field 'prompt' is empty" in lines[8]
    assert "arithmetic" in out and "0.5" in out  # per-source counts and mix ratio of the usable records (3 of 6)


def test_audit_of_a_clean_file_passes(tmp_path, capsys):
    src = _write(
        tmp_path / "ok.jsonl",
        [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(5)]
        + [{"prompt": "Set?", "answer": r"\{1, 2\}"}, {"prompt": "Pi?", "answer": "≈ 3.14"}],
    )
    assert main(["data", "audit", str(src)]) == 0
    assert "OK" in capsys.readouterr().out
