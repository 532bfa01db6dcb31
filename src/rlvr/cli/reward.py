"""`rlvr reward score INPUT.jsonl [key=value ...] [--out OUT.jsonl] [--repeat N]`

Each input line: `completion`, the gold `answer` (or `tests` for code), optional
`prompt` (its words are the count labels an answer may carry: `12 apples`),
`verifier` (default math), `source`, `id`. Each output line repeats every input
field unchanged and adds `reward`, `components`, `valid`, `error`, `flag`, the
`extracted` answers and the seconds spent in a verification worker (`verify_s`). A per-source
summary table follows on stderr. `--repeat 2` scores the file again with fresh
workers and reports every sample whose reward changed (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from rlvr.cli._common import add_config_files, config_from_args
from rlvr.records import Problem, RewardResult

CHUNK = 512  # lines scored per call: big enough to keep every worker busy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "score",
        help="score completions in a JSONL file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", type=Path, help="JSONL file: completion, answer|tests, verifier, source")
    p.add_argument("--out", type=Path, default=None, help="write scored lines here (default: stdout)")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="score the file N times with fresh workers and report any reward that changed",
    )
    add_config_files(p, "; its `reward` section is used")
    p.add_argument("overrides", nargs="*", help="dotted overrides right after the file, e.g. reward.math.timeout_s=2")


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """(line number, object or None, error or None) for every non-blank line."""
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield n, None, f"not valid JSON: {exc.msg} (column {exc.colno})"
                continue
            if not isinstance(obj, dict):
                yield n, None, f"expected a JSON object, got {type(obj).__name__}"
                continue
            yield n, obj, None


def problem_from(obj: dict[str, Any], n: int) -> Problem:
    answer = obj.get("answer")
    return Problem(
        id=str(obj.get("id", f"line{n}")),
        prompt=obj.get("prompt") or "",
        answer=None if answer is None else str(answer),
        tests=obj.get("tests"),
        source=str(obj.get("source") or "default"),
        verifier=str(obj.get("verifier") or "math"),
        metadata=obj.get("metadata") or {},
    )


def _score_all(reward_cfg: Any, items: list[tuple[int, dict[str, Any]]]) -> list[RewardResult]:
    from rlvr.rewards import build_reward

    results: list[RewardResult] = []
    with build_reward(reward_cfg) as reward:
        for start in range(0, len(items), CHUNK):
            chunk = items[start : start + CHUNK]
            problems = [problem_from(obj, n) for n, obj in chunk]
            texts = [str(obj.get("completion") or "") for _, obj in chunk]
            results += reward.score(problems, texts)
    return results


def summary_rows(problems: list[Problem], results: list[RewardResult]) -> list[dict[str, Any]]:
    from rlvr.rewards.monitor import reward_metrics, source_key

    m = reward_metrics(problems, results)
    sources = sorted({p.source for p in problems})
    rows = []
    for s in sources:
        pre = f"reward/source/{source_key(s)}/"
        rows.append(
            {
                "source": s,
                "n": int(m.get(pre + "n", 0)),
                "reward": m.get(pre + "mean", 0.0),
                "correct": m.get(pre + "correct_mean", 0.0),
                "invalid": m.get(pre + "invalid_frac", 0.0),
                "parse_failed": m.get(pre + "parse_failed_frac", 0.0),
            }
        )
    rows.append(
        {
            "source": "all",
            "n": len(results),
            "reward": m["reward/mean"],
            "correct": m.get("reward/correct_mean", 0.0),
            "invalid": m["reward/invalid_frac"],
            "parse_failed": m["reward/parse_failed_frac"],
        }
    )
    return rows


def print_table(title: str, rows: list[dict[str, Any]], file: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in rows[0]:
        table.add_column(col, justify="left" if col == "source" else "right")
    for row in rows:
        table.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()])
    Console(file=file, width=120).print(table)


def _output(obj: dict[str, Any], r: RewardResult) -> dict[str, Any]:
    """The input line with the verdict beside it; every input field is kept as it was."""
    out = {
        "reward": r.total,
        "components": r.components,
        "valid": r.valid,
        "error": r.error,
        "flag": r.info.get("flag"),
        "extracted": r.info.get("extracted"),
        "verify_s": r.info.get("verify_s"),
    }
    return {**obj, **{k: v for k, v in out.items() if k not in obj}}


def run(args: argparse.Namespace) -> int:

    cfg = config_from_args(args)
    if not args.input.is_file():
        print(f"rlvr reward score: {args.input}: file not found", file=sys.stderr)
        return 2
    items: list[tuple[int, dict[str, Any]]] = []
    bad = 0
    for n, obj, err in read_jsonl(args.input):
        if obj is None:
            print(f"{args.input}:{n}: {err}; line skipped", file=sys.stderr)
            bad += 1
        else:
            items.append((n, obj))
    results = _score_all(cfg.reward, items)
    out = args.out.open("w", encoding="utf-8") if args.out else sys.stdout
    try:
        for (_, obj), r in zip(items, results):
            out.write(json.dumps(_output(obj, r), ensure_ascii=False) + "\n")
    finally:
        if args.out:
            out.close()
    problems = [problem_from(obj, n) for n, obj in items]
    if items:
        print_table(f"rewards: {args.input}", summary_rows(problems, results), sys.stderr)
    changed = 0
    for attempt in range(2, max(1, args.repeat) + 1):
        again = _score_all(cfg.reward, items)
        for (n, _), a, b in zip(items, results, again):
            if (a.total, a.components, a.valid) != (b.total, b.components, b.valid):
                changed += 1
                print(
                    f"{args.input}:{n}: reward changed on repeat {attempt}: {a.total} {a.components} "
                    f"valid={a.valid} -> {b.total} {b.components} valid={b.valid} ({b.error or a.error or ''})",
                    file=sys.stderr,
                )
    if args.repeat > 1:
        verdict = "deterministic" if not changed else f"{changed} sample(s) changed"
        print(f"repeat x{args.repeat}: {len(items)} samples, {verdict}", file=sys.stderr)
    return 1 if (bad or changed) else 0
