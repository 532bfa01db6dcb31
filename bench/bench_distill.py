"""On-policy distillation against RL alone: how fast each closes half the gap to a better teacher.

    .venv/bin/python bench/bench_distill.py [--root /tmp/distill] [--steps 6] [--json bench/distill_results.json]

1. The teacher: the default run (`rlvr train`, the tiny model after its cold start and 60 GRPO steps),
   reused from --root when there.
2. From the same cold start (the student: the default run's starting point), `--steps` steps each:
   RL alone (the default run's settings), distillation alone (`algo.distill.teacher=<teacher>
   algo.distill.rewards=false`), and distillation with the verifier's rewards; every run evaluated
   on the same held-out problems after every step (eval.every=1).
3. The target is half the held-out gap between student and teacher; for each run, the first step
   whose held-out accuracy reaches it and the training seconds up to it (the step's own time/* sums:
   rollout, reward, reference, teacher, update; evaluation left out).

Every run is a fresh `rlvr train` interpreter; they share one cold-start cache.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP_TIMES = ("time/rollout_s", "time/reward_s", "time/ref_s", "time/teacher_s", "time/update_s", "sync/seconds")


def train(run_dir: Path, cache: Path, extra: list[str]) -> list[dict]:
    if not (run_dir / "summary.json").exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "rlvr.cli",
                "train",
                f"run.dir={run_dir}",
                f"sft.cache_dir={cache}",
                "run.progress=false",
                *extra,
            ],
            check=True,
            cwd=ROOT,
        )
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def curve(rows: list[dict]) -> list[dict]:
    """Per evaluated step: held-out accuracy and the training seconds up to it."""
    out, seconds = [], 0.0
    for r in rows:
        seconds += sum(r.get(k, 0.0) for k in STEP_TIMES)
        if "eval/accuracy" in r:
            out.append({"step": r["step"], "accuracy": r["eval/accuracy"], "train_s": round(seconds, 1)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT / "runs" / "bench-distill")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "distill_results.json")
    args = ap.parse_args()
    cache, t0 = args.root / "cache", time.time()
    teacher_rows = train(args.root / "teacher", cache, [])
    teacher = json.loads((args.root / "teacher" / "summary.json").read_text())["eval_after"]["accuracy"]
    runs = {"rl": [], "distill": ["algo.distill.rewards=false"], "distill_rl": []}
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": " ".join(["python", *sys.argv]),
        "teacher": {"run": str(args.root / "teacher"), "accuracy": teacher, "steps": len(teacher_rows) - 1},
    }
    student = None
    for name, extra in runs.items():
        distill = [f"algo.distill.teacher={args.root / 'teacher' / 'model'}"] if name != "rl" else []
        rows = train(args.root / name, cache, [f"train.steps={args.steps}", "eval.every=1", *distill, *extra])
        points = curve(rows)
        student = points[0]["accuracy"]
        target = student + (teacher - student) / 2
        reached = next((p for p in points[1:] if p["accuracy"] >= target), None)
        result[name] = {
            "overrides": distill + extra,
            "curve": points,
            "target": round(target, 4),
            "reached_at_step": reached and reached["step"],
            "reached_after_train_s": reached and reached["train_s"],
        }
    result["student"] = student
    result["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps({k: v for k, v in result.items()}, indent=2))
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
