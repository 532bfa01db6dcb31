"""Test formats of a problem's `tests` field, and judging a sandbox run against them.

    {"type": "stdio", "cases": [{"input": "1 2\\n", "output": "3\\n"}, ...]}
    {"type": "function", "entry_point": "add", "cases": [{"args": [1, 2], "expected": 3}, ...]}
    {"type": "assert", "entry_point": "add", "test": "def check(candidate):\\n    assert ..."}

Only inputs go into the sandbox (`sandbox_cases`); expected values stay here and
are compared in this trusted process (`judge`). The assert type's check code holds
its expected values, so it runs in a trusted checker process inside the sandbox,
never in the program's (`_checker.py`); its verdict arrives on the result pipe
with the run's nonce, which only the checker knows (see docs/guides/sandbox.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from rlvr.sandbox.executor import Execution

KINDS = {"stdio": "program", "function": "function", "assert": "assert"}


class TestFormatError(ValueError):
    """A problem's `tests` field is malformed (a data problem, not the model's)."""

    __test__ = False  # not a pytest test class, despite the name


@dataclass(frozen=True)
class TestSpec:
    __test__ = False
    kind: str
    cases: list[dict[str, Any]]
    entry_point: str | None = None
    test: str | None = None
    rel_tol: float = 1e-9
    prefix: str = ""
    """Code put before the extracted program (e.g. HumanEval's prompt: its imports and helper functions,
    which a completion that repeats only the asked function needs); the program's definitions win."""

    @property
    def mode(self) -> str:
        return KINDS[self.kind]


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str
    """'' when passed; else wrong_answer, exception, timeout, memory, output_limit, syntax_error, ..."""


def parse_tests(tests: Any) -> TestSpec:
    if not isinstance(tests, dict):
        raise TestFormatError(f"tests: expected a mapping with a 'type' key, got {type(tests).__name__}")
    kind = tests.get("type")
    if kind not in KINDS:
        raise TestFormatError(f"tests.type: expected one of {', '.join(KINDS)}, got {kind!r}")
    entry = tests.get("entry_point")
    if kind in ("function", "assert") and (not isinstance(entry, str) or not entry.isidentifier()):
        raise TestFormatError(f"tests.entry_point: a {kind} test needs the function name, got {entry!r}")
    if kind == "assert":
        test = tests.get("test")
        if not isinstance(test, str) or "def check" not in test:
            raise TestFormatError("tests.test: an assert test needs code defining check(candidate)")
        return TestSpec(kind, [{}], entry, test, prefix=_prefix(tests))
    cases = tests.get("cases")
    if not isinstance(cases, list) or not cases:
        raise TestFormatError("tests.cases: expected a non-empty list")
    for i, case in enumerate(cases):
        need = ("input", "output") if kind == "stdio" else ("expected",)
        if not isinstance(case, dict) or any(k not in case for k in need):
            raise TestFormatError(f"tests.cases[{i}]: a {kind} case needs {' and '.join(need)}")
        if kind == "stdio" and not (isinstance(case["input"], str) and isinstance(case["output"], str)):
            raise TestFormatError(f"tests.cases[{i}]: input and output must be strings")
        if kind == "function" and not isinstance(case.get("args", []), list):
            raise TestFormatError(f"tests.cases[{i}].args: expected a list of arguments")
        if kind == "function" and not isinstance(case.get("kwargs", {}), dict):
            raise TestFormatError(f"tests.cases[{i}].kwargs: expected a mapping")
    rel_tol = tests.get("rel_tol", 1e-9)
    if not isinstance(rel_tol, (int, float)) or rel_tol < 0:
        raise TestFormatError(f"tests.rel_tol: expected a number >= 0, got {rel_tol!r}")
    return TestSpec(kind, cases, entry, None, float(rel_tol), prefix=_prefix(tests))


def _prefix(tests: dict) -> str:
    prefix = tests.get("prefix", "")
    if not isinstance(prefix, str):
        raise TestFormatError(f"tests.prefix: expected code as a string, got {type(prefix).__name__}")
    return prefix + "\n" if prefix and not prefix.endswith("\n") else prefix


def sandbox_cases(spec: TestSpec) -> list[dict[str, Any]]:
    """What the sandbox may see of each case: the inputs, never the expected values."""
    if spec.kind == "stdio":
        return [{"stdin": c["input"]} for c in spec.cases]
    if spec.kind == "function":
        return [{"args": c.get("args", []), "kwargs": c.get("kwargs", {})} for c in spec.cases]
    return [{}]


def normalize_output(text: str) -> str:
    """Trailing whitespace does not count: per line, and trailing blank lines."""
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").rstrip().split("\n"))


def same_value(got: Any, want: Any, rel_tol: float) -> bool:
    """Equality of plain JSON data; bool is not a number here, and floats get `rel_tol`."""
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        if isinstance(got, float) or isinstance(want, float):
            return math.isclose(got, want, rel_tol=rel_tol, abs_tol=0.0) or got == want
        return got == want
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(same_value(g, w, rel_tol) for g, w in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(same_value(got[k], want[k], rel_tol) for k in got)
    return type(got) is type(want) and got == want


def _payload(line: str | None, nonce: str, index: int) -> dict[str, Any] | None:
    """The result of case `index`, only if it carries this run's nonce."""
    if not line:
        return None
    parts = line.split(" ", 2)
    if len(parts) != 3 or parts[0] != nonce or parts[1] != str(index):
        return None
    try:
        payload = json.loads(parts[2])
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def judge(spec: TestSpec, run: Execution) -> list[Verdict]:
    """One verdict per case of a run that finished (run.ok)."""
    out = []
    for i, (case, res) in enumerate(zip(spec.cases, run.cases)):
        if res["status"] != "ok":
            out.append(Verdict(False, res["reason"] or res["status"]))
        elif spec.kind == "stdio":
            if res["truncated"]:
                out.append(Verdict(False, "output_limit"))
            else:
                ok = normalize_output(res["stdout"]) == normalize_output(case["output"])
                out.append(Verdict(ok, "" if ok else "wrong_answer"))
        else:
            payload = _payload(res.get("result"), run.nonce, i)
            if payload is None:
                out.append(Verdict(False, "no_result"))
            elif spec.kind == "function":
                if "value" not in payload:
                    out.append(Verdict(False, "exception"))
                else:
                    ok = same_value(payload["value"], case["expected"], spec.rel_tol)
                    out.append(Verdict(ok, "" if ok else "wrong_answer"))
            elif payload.get("check_error"):
                out.append(Verdict(False, "check_error"))
            else:
                ok = payload.get("passed") is True
                out.append(Verdict(ok, "" if ok else "assertion_failed"))
    return out
