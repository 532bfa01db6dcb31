"""Steps per second of the embedded loop vs the Ray backend in sync and async mode, in one run.

    .venv/bin/python bench/bench_ray.py [--steps 20] [--out bench/ray_results.json] [key=value ...]

The default task and model as they are (the lead tunes them; overrides after the flags apply to
all three runs), the same seed and number of steps for each. Rate = steps / summed perf/step_s
(the loop's own step time: batch collection + update; evaluation, start-up and the final export
are left out and reported separately as wall time). Also prints held-out accuracy after the run,
so the async run's off-policy batches can be checked against the embedded run.

On Ray each module gets one CPU (one torch thread), so in sync mode rollout and update take
turns on the cores while in async mode they run at the same time; embedded uses every core for
each phase in turn.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rlvr.config import load_config  # noqa: E402
from rlvr.runlog import read_jsonl  # noqa: E402

MODES = {
    "embedded": [],
    "ray_sync": ["deploy.backend=ray"],
    "ray_async": ["deploy.backend=ray", "deploy.async=true", "deploy.max_staleness=1"],
}


def measure(name: str, overrides: list[str], base: Path) -> dict:
    cfg = load_config(None, overrides + MODES[name] + [f"run.dir={base / name}"])
    t0 = time.time()
    if cfg.deploy.backend == "ray":
        from rlvr.deploy.ray.driver import run
        summary = run(cfg)
    else:
        from rlvr.train.grpo import train
        summary = train(cfg)
    wall = time.time() - t0
    rows = [r for r in read_jsonl(base / name / "metrics.jsonl") if "perf/step_s" in r]
    loop_s = sum(r["perf/step_s"] for r in rows)
    out = {"status": summary["status"], "steps": len(rows), "steps_per_s": len(rows) / loop_s,
           "loop_s": round(loop_s, 2), "wall_s": round(wall, 2),
           "eval_after": summary["eval_after"]["accuracy"], "eval_before": summary["eval_before"]["accuracy"],
           "reward_mean": sum(r["reward/mean"] for r in rows) / len(rows)}
    if "perf/staleness_max" in rows[-1]:
        out["staleness_max"] = max(r["perf/staleness_max"] for r in rows)
        out["staleness_mean"] = sum(r["perf/staleness_mean"] for r in rows) / len(rows)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default="bench/ray_results.json")
    ap.add_argument("--dir", default="runs/bench_ray")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    common = [f"train.steps={args.steps}", "eval.every=0", "ckpt.every=0", "run.progress=false",
              "log.tensorboard=false", "log.report=false", *args.overrides]
    base = Path(args.dir)
    results = {name: measure(name, common, base) for name in MODES}
    for name, r in results.items():
        print(f"{name:10s} {r['steps_per_s']:.3f} steps/s  loop {r['loop_s']:7.1f}s  wall {r['wall_s']:7.1f}s  "
              f"held-out {r['eval_before']:.1%} -> {r['eval_after']:.1%}  "
              + (f"staleness mean {r['staleness_mean']:.2f} max {r['staleness_max']:.0f}" if "staleness_max" in r else ""))
    rs, ra, re = (results[k]["steps_per_s"] for k in ("ray_sync", "ray_async", "embedded"))
    gap = abs(results["ray_async"]["eval_after"] - results["embedded"]["eval_after"]) * 100
    print(f"ray_async / ray_sync = {ra / rs:.2f}x (target >= 1.3x); ray_async / embedded = {ra / re:.2f}x; "
          f"held-out gap async vs embedded = {gap:.1f} points (target <= 5)")
    results["ratios"] = {"async_over_sync": ra / rs, "async_over_embedded": ra / re, "accuracy_gap_points": gap}
    Path(args.out).write_text(json.dumps({"steps": args.steps, "overrides": common, **results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
