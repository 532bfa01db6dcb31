"""`rlvr data audit DATA [DATA ...] [key=value ...]`: check a training set before any GPU is spent.
(`rlvr data recording DIR --sft F --pairs F`: training data from a served recording, rlvr.serve.record.)

The files are read by the trainer's own reader (JSONL, Parquet, a datasets
directory; rlvr.tasks.files), so a record reported `invalid` is exactly one
training stops on (or, with data.on_bad_record=skip, leaves out), and every
other record is one it trains on. On those: math golds parse and score
correct = 1 against themselves written as a model would write them (a gold
that cannot do that teaches the model nothing), and agree with the record's
worked `solution` (or `metadata.solution`) and, for a bare arithmetic prompt
such as `12+345=`, with its value (a mislabelled gold); code golds are run in
the sandbox: the reference `solution` passes its own tests, and a program that
does nothing fails them. Across records: duplicate prompts, per-source counts
and the mix ratio. Every problem is reported as FILE:LINE (FILE: row N); the
exit status is 1 when anything is wrong.
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
from rlvr.cli.reward import print_table
from rlvr.configlib import ConfigError
from rlvr.records import Problem

_ARITH_PROMPT_RE = re.compile(
    r"^\s*(?:what is|compute|calculate|evaluate)?\s*:?\s*([-+*/×÷()\d\s.]*\d[-+*/×÷()\d\s.]*?)\s*=?\s*\??\s*$",
    re.IGNORECASE,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "audit",
        help="check a training set (JSONL, Parquet, datasets) as training reads it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "data",
        type=Path,
        nargs="+",
        metavar="DATA",
        help="data files or directories, as data.files takes them (rlvr.tasks.files)",
    )
    add_config_files(p, "; its `reward` section is used")
    p.add_argument(
        "overrides", nargs="*", help="dotted overrides right after the file, e.g. reward.math.extract=[boxed]"
    )

    r = sub.add_parser(
        "recording",
        help="training data from `rlvr serve --record DIR`: SFT records and preference pairs",
        description="SFT records (responses scored at least --min-score, preferred alternatives) and "
        "preference pairs (a preferred alternative over its response; the higher-scored of two "
        "responses to one conversation) from a recording with its feedback (rlvr.serve.record).",
    )
    r.add_argument("recording", metavar="DIR", help="the directory (or URL) rlvr serve --record wrote")
    r.add_argument("--sft", type=Path, metavar="FILE", help="JSONL for `rlvr sft --data FILE`")
    r.add_argument("--pairs", type=Path, metavar="FILE", help="JSONL for `rlvr rm train FILE`")
    r.add_argument(
        "--min-score", type=float, default=1.0, help="the score a response needs to become SFT data (default 1.0)"
    )


def recording(args: argparse.Namespace) -> int:
    from rlvr.serve.record import training_data
    from rlvr.urls import join, read_text

    if read_text(join(args.recording, "served.jsonl")) is None:
        print(
            f"rlvr data recording: {args.recording}/served.jsonl: no recording (rlvr serve --record DIR writes it)",
            file=sys.stderr,
        )
        return 2
    if not (args.sft or args.pairs):
        print("rlvr data recording: say what to write: --sft FILE and/or --pairs FILE", file=sys.stderr)
        return 2
    sft, pairs = training_data(args.recording, args.min_score)
    for path, rows, what in ((args.sft, sft, "SFT records"), (args.pairs, pairs, "preference pairs")):
        if path is not None:
            path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
            print(f"{path}: {len(rows)} {what}")
    return 0


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


def trivially_wrong(problem: Problem, extract: str) -> str:
    """A completion whose program does nothing (returns None, prints nothing): tests it passes check nothing."""
    from rlvr.sandbox.cases import parse_tests

    spec = parse_tests(problem.tests)
    code = f"def {spec.entry_point}(*args, **kwargs):\n    return None\n" if spec.entry_point else "pass\n"
    return code if extract == "whole_text" else f"```python\n{code}```"


def audit(paths: list[Path], cfg: Any) -> tuple[list[tuple[str, str]], int, Counter]:
    """(issues as (where, message) in file order, records training cannot use, per-source counts of
    the records it can). The records are read by the trainer's own reader (rlvr.tasks.files)."""
    from rlvr.rewards import build_reward
    from rlvr.tasks.files import read_records

    found: list[tuple[int, str, str]] = []  # (record index, where, message)
    invalid = 0
    sources: Counter = Counter()
    seen_prompt: dict[str, str] = {}
    checks: list[tuple[int, str, str, Problem, str]] = []  # (index, where, what, problem, completion)
    for i, (where, problem, reason) in enumerate(read_records(paths)):
        if problem is None:
            invalid += 1
            found.append((i, where, f"invalid: {reason} (training stops here; data.on_bad_record=skip leaves it out)"))
            continue
        sources[problem.source] += 1
        key = " ".join(json.dumps(problem.prompt, sort_keys=True, ensure_ascii=False).split())
        if key in seen_prompt:
            found.append((i, where, f"duplicate prompt (first at {seen_prompt[key]})"))
        seen_prompt.setdefault(key, where)
        solution = problem.solution or problem.metadata.get("solution")
        solution = solution if isinstance(solution, str) and solution.strip() else None
        if problem.verifier == "math":
            assert problem.answer is not None
            checks.append((i, where, "self", problem, written_as_model(problem.answer, cfg)))
            if solution:
                checks.append((i, where, "solution", problem, solution))
            value = arithmetic_value(problem.prompt)
            if value is not None:
                checks.append((i, where, "prompt", problem, f"\\boxed{{{value}}}"))
        elif problem.verifier == "code":
            if solution:
                checks.append((i, where, "reference", problem, solution))
            checks.append((i, where, "trivial", problem, trivially_wrong(problem, cfg.code.extract)))
    if checks:
        with build_reward(cfg) as reward:
            results = reward.score([c[3] for c in checks], [c[4] for c in checks])
        for (i, where, what, problem, text), r in zip(checks, results):
            found += [(i, where, msg) for msg in _check_message(what, problem, text, r, cfg)]
    return [(where, msg) for _, where, msg in sorted(found, key=lambda x: x[0])], invalid, sources


def _check_message(what: str, problem: Problem, text: str, r: Any, cfg: Any) -> list[str]:
    if what in ("reference", "trivial"):
        passed = r.valid and r.components.get("correct") == 1.0
        if what == "reference" and not passed:
            why = r.error if not r.valid else (r.info.get("reason") or r.info.get("flag") or "a test fails")
            return [f"code gold: the reference solution fails its own tests ({why})"]
        if what == "trivial" and passed:
            return [
                (
                    "code gold: a program that does nothing (returns None, prints nothing) passes the tests: "
                    "they check nothing"
                )
            ]
        return []
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
        return [
            (
                f"gold {gold!r} does not score correct=1 against itself written as {text!r} "
                f"({r.info.get('flag') or 'not equivalent'})"
            )
        ]
    if what == "solution":
        return [f"mislabelled gold: the reference solution's final answer is {said!r}, gold is {gold!r}"]
    return [f"mislabelled gold: the prompt evaluates to {said!r}, gold is {gold!r}"]


def run(args: argparse.Namespace) -> int:
    if args.action == "recording":
        return recording(args)
    from rlvr.tasks.files import data_files

    cfg = config_from_args(args)
    try:
        for path in args.data:
            data_files(path)
    except ConfigError as exc:
        print(f"rlvr data audit: {exc}", file=sys.stderr)
        return 2
    issues, invalid, sources = audit(args.data, cfg.reward)
    for where, msg in issues:
        print(f"{where}: {msg}")
    total = sum(sources.values())
    name = ", ".join(map(str, args.data))
    if total:
        rows = [{"source": s, "n": c, "share": c / total} for s, c in sorted(sources.items())]
        rows.append({"source": "all", "n": total, "share": 1.0})
        print_table("mix (usable records per source)", rows, sys.stdout)
    print(
        f"{name}: {total} usable record(s), {invalid} invalid, {len(issues)} issue(s) on "
        f"{len({w for w, _ in issues})} record(s)" + ("" if issues else ": OK")
    )
    return 1 if issues else 0
