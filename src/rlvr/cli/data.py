"""`rlvr data audit DATA.jsonl [key=value ...]`: check a training set before any GPU is spent.

Per line: valid JSON object; no empty prompt/answer/tests; a known verifier;
the gold parses; the gold scores correct = 1 against itself when written as a
model would write it (a gold that cannot do that teaches the model nothing);
the gold agrees with the line's own reference `solution` (top level or in
`metadata`) and, for a bare arithmetic prompt such as `12+345=`, with its
value (a mislabelled gold). Across lines: duplicate prompts and ids, per-source
counts and the mix ratio. Every problem is reported as FILE:LINE; the exit
status is 1 when anything is wrong.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rlvr.cli._common import add_config_files, config_from_args
from rlvr.cli.reward import print_table, problem_from, read_jsonl
from rlvr.records import Problem

_ARITH_PROMPT_RE = re.compile(
    r"^\s*(?:what is|compute|calculate|evaluate)?\s*:?\s*([-+*/×÷()\d\s.]*\d[-+*/×÷()\d\s.]*?)\s*=?\s*\??\s*$",
    re.IGNORECASE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("audit", help="check a JSONL training set", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", type=Path, help="JSONL: prompt, answer|tests, optional verifier, source, id, solution")
    add_config_files(p, "; its `reward` section is used")
    p.add_argument("overrides", nargs="*",
                   help="dotted overrides right after the file, e.g. reward.math.extract=[boxed]")


def written_as_model(answer: str, cfg: Any) -> str:
    """The gold as a model following the configured format would write it."""
    from rlvr.rewards.canonical import gold_text

    text = gold_text(answer)
    policies = cfg.math.extract
    if "answer_tag" in policies and cfg.format.kind in ("think_answer", "answer", "none"):
        return f"<think>The result follows.</think><answer>{text}</answer>"
    if "boxed" in policies:
        return f"The answer is \\boxed{{{text}}}."
    if "answer_line" in policies:
        return f"Work.\nAnswer: {text}"
    if "gsm8k" in policies:
        return f"Work.\n#### {text}"
    return text


def arithmetic_value(prompt: Any) -> str | None:
    """The value of a bare arithmetic prompt (`12+345=`, `What is 3*4?`), else None."""
    from rlvr.rewards.process import _value

    if not isinstance(prompt, str):
        return None
    m = _ARITH_PROMPT_RE.match(prompt)
    if not m or not re.search(r"\d\s*[-+*/×÷]\s*\(?-?\d", m.group(1)):
        return None
    v = _value(m.group(1))
    if v is None:
        return None
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list, dict)) and not (value.strip() if isinstance(value, str) else value))


def _line_issues(obj: dict[str, Any], known: set[str]) -> list[str]:
    issues = []
    verifier = obj.get("verifier") or "math"
    if verifier not in known:
        issues.append(f"unknown verifier {verifier!r} (known: {', '.join(sorted(known))})")
    if _empty(obj.get("prompt")):
        issues.append("empty field 'prompt'")
    gold_field = "tests" if verifier == "code" else "answer"
    if _empty(obj.get(gold_field)):
        issues.append(f"empty field {gold_field!r}" if gold_field in obj else f"missing field {gold_field!r}")
    for key, value in obj.items():
        if key not in ("prompt", gold_field) and isinstance(value, str) and not value.strip():
            issues.append(f"empty field {key!r}")
    return issues


def audit(path: Path, cfg: Any) -> tuple[list[tuple[int, str]], Counter]:
    from rlvr.rewards import VERIFIERS, build_reward

    issues: list[tuple[int, str]] = []
    sources: Counter = Counter()
    seen_prompt: dict[str, int] = {}
    seen_id: dict[str, int] = {}
    checks: list[tuple[int, str, Problem, str]] = []  # (line, what, problem, completion)
    for n, obj, err in read_jsonl(path):
        if obj is None:
            issues.append((n, f"malformed line: {err}"))
            continue
        sources[str(obj.get("source") or "default")] += 1
        issues += [(n, msg) for msg in _line_issues(obj, set(VERIFIERS))]
        key = json.dumps(obj.get("prompt"), sort_keys=True, ensure_ascii=False)
        if not _empty(obj.get("prompt")):
            key = " ".join(key.split())
            if key in seen_prompt:
                issues.append((n, f"duplicate prompt (first seen on line {seen_prompt[key]})"))
            seen_prompt.setdefault(key, n)
        if "id" in obj:
            if str(obj["id"]) in seen_id:
                issues.append((n, f"duplicate id {obj['id']!r} (first seen on line {seen_id[str(obj['id'])]})"))
            seen_id.setdefault(str(obj["id"]), n)
        problem = problem_from(obj, n)
        if problem.verifier != "math" or _empty(problem.answer):
            continue
        assert problem.answer is not None
        checks.append((n, "self", problem, written_as_model(problem.answer, cfg)))
        solution = obj.get("solution") or (obj.get("metadata") or {}).get("solution")
        if isinstance(solution, str) and solution.strip():
            checks.append((n, "solution", problem, solution))
        value = arithmetic_value(obj.get("prompt"))
        if value is not None:
            checks.append((n, "prompt", problem, f"\\boxed{{{value}}}"))
    if checks:
        with build_reward(cfg) as reward:
            results = reward.score([c[2] for c in checks], [c[3] for c in checks])
        for (n, what, problem, text), r in zip(checks, results):
            issues += [(n, msg) for msg in _check_message(what, problem, text, r, cfg)]
    return sorted(issues, key=lambda x: x[0]), sources


def _check_message(what: str, problem: Problem, text: str, r: Any, cfg: Any) -> list[str]:
    gold = problem.answer
    if not r.valid and "does not parse" in (r.error or ""):
        return [f"gold answer {gold!r} does not parse"] if what == "self" else []
    if not r.valid:
        return [f"gold {gold!r} could not be verified ({what} check): {r.error}"]
    if r.components.get("correct") == 1.0:
        if what == "self" and cfg.format.kind in ("think_answer", "answer") and r.components.get("format") != 1.0:
            return [f"gold {gold!r} breaks the required {cfg.format.kind} format when written as an answer"]
        return []
    said = r.info.get("answer")
    if what == "self":
        return [f"gold {gold!r} does not score correct=1 against itself written as {text!r} "
                f"({r.info.get('flag') or 'not equivalent'})"]
    if what == "solution":
        return [f"mislabelled gold: the reference solution's final answer is {said!r}, gold is {gold!r}"]
    return [f"mislabelled gold: the prompt evaluates to {said!r}, gold is {gold!r}"]


def run(args: argparse.Namespace) -> int:

    cfg = config_from_args(args)
    if not args.data.is_file():
        print(f"rlvr data audit: {args.data}: file not found", file=sys.stderr)
        return 2
    issues, sources = audit(args.data, cfg.reward)
    for n, msg in issues:
        print(f"{args.data}:{n}: {msg}")
    total = sum(sources.values())
    if total:
        rows = [{"source": s, "n": c, "share": c / total} for s, c in sorted(sources.items())]
        rows.append({"source": "all", "n": total, "share": 1.0})
        print_table(f"mix: {args.data}", rows, sys.stdout)
    bad_lines = len({n for n, _ in issues})
    print(f"{args.data}: {total} problem(s), {len(issues)} issue(s) on {bad_lines} line(s)"
          + ("" if issues else ": OK"))
    return 1 if issues else 0
