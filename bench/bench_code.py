"""The code task and the math+code mix, end to end: held-out pass rate per source before and after,
the wall time (cold start included when it is not cached yet), and a paired test of the cold
start against the trained model on the same held-out problems (`rlvr compare`: exact McNemar).

    .venv/bin/python bench/bench_code.py [--runs code mixed] [--json FILE] [key=value ...]

`code` is `rlvr train task.name=code`, `mixed` is `rlvr train task.name=arithmetic+code` (math:code
6:4); extra key=value overrides go to both. Each run is a fresh interpreter, one after the other.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"code": "code", "mixed": "arithmetic+code"}


def rlvr(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlvr.cli", *args], cwd=ROOT, capture_output=True, text=True)


def one(kind: str, overrides: list[str]) -> dict:
    name = f"bench-{kind}"
    task = f"task.name={TASKS[kind]}"
    t0 = time.time()
    done = rlvr("train", task, f"run.name={name}", "run.progress=false", *overrides)
    wall = time.time() - t0
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return {"run": kind, "status": f"exit {done.returncode}", "wall_s": round(wall, 1)}
    summary = json.loads((ROOT / "runs" / name / "summary.json").read_text())
    before, after = summary["eval_before"], summary["eval_after"]
    row = {
        "run": kind,
        "status": summary["status"],
        "wall_s": round(wall, 1),
        "n": before["n"],
        "before": before["accuracy"],
        "after": after["accuracy"],
        "by_source_before": before.get("by_source"),
        "by_source_after": after.get("by_source"),
    }
    out = ROOT / "runs" / name / "compare.json"
    cmp = rlvr("compare", summary["start_from"], str(ROOT / "runs" / name), task, *overrides, "--out", str(out))
    if cmp.returncode == 0:
        greedy = json.loads(out.read_text())["greedy"]
        row["mcnemar_p"], row["only_before"], row["only_after"] = (
            greedy["mcnemar_p"],
            greedy["only_a"],
            greedy["only_b"],
        )
    else:
        print(cmp.stderr[-2000:], file=sys.stderr)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", choices=sorted(TASKS), default=["code", "mixed"])
    ap.add_argument("--json", default=None)
    args, overrides = ap.parse_known_args()
    rows = []
    for kind in args.runs:
        row = one(kind, overrides)
        rows.append(row)
        if "before" not in row:
            print(f"{kind}: {row['status']}", flush=True)
            continue
        sources = "".join(
            f", {s} {row['by_source_before'][s]:.1%} -> {row['by_source_after'][s]:.1%}"
            for s in row["by_source_before"] or {}
        )
        test = f", McNemar p = {row['mcnemar_p']:.2g}" if "mcnemar_p" in row else ""
        print(
            f"{kind}: held-out {row['before']:.1%} -> {row['after']:.1%} ({row['after'] - row['before']:+.1%}, "
            f"n={row['n']}){sources}{test}; {row['wall_s'] / 60:.1f} min, {row['status']}",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
