"""Steps per second of the embedded loop vs the Ray backend in sync and async mode, in one run.

    .venv/bin/python bench/bench_ray.py [--steps 20] [--out bench/ray_results.json] [key=value ...]
    .venv/bin/python bench/bench_ray.py --config configs/tool_arithmetic.yaml \
        --modes ray_async,ray_async_partial --out bench/partial_results.json     # partial rollouts

The default task and model as they are (the lead tunes them; overrides after the flags apply to
all three runs), the same seed and number of steps for each. Rate = steps / summed perf/step_s
(the loop's own step time: batch collection + update; evaluation, start-up and the final export
are left out and reported separately as wall time). Also prints held-out accuracy after the run,
so the async run's off-policy batches can be checked against the embedded run. With partial
rollouts (deploy.partial_rollouts) it also reports the staleness per sampled token, the share of
trajectories sampled by more than one policy version and the weights taken mid-sampling.

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
from rlvr.stats import paired_report  # noqa: E402
from rlvr.sweep import outcomes  # noqa: E402

MODES = {
    "embedded": [],
    "ray_sync": ["deploy.backend=ray"],
    "ray_async": ["deploy.backend=ray", "deploy.async=true", "deploy.max_staleness=1"],
    "ray_async_partial": [
        "deploy.backend=ray",
        "deploy.async=true",
        "deploy.max_staleness=1",
        "deploy.partial_rollouts=true",
    ],
}


def mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def paired(base: Path, a: str, b: str) -> dict:
    """Held-out correctness after training of mode a against mode b, problem by problem."""
    mine, theirs = outcomes(base / a), outcomes(base / b)
    ids = sorted(theirs)
    rep = paired_report([theirs[i] for i in ids], [mine[i] for i in ids], alpha=0.05, iterations=10000, seed=0)
    return {
        "diff_points": rep["diff"] * 100,
        "ci95_points": [x * 100 for x in rep["ci"]],
        "mcnemar_p": rep["mcnemar_p"],
    }


def measure(name: str, config: str | None, overrides: list[str], base: Path) -> dict:
    cfg = load_config(config, overrides + MODES[name] + [f"run.dir={base / name}"])
    t0 = time.time()
    if cfg.deploy.backend == "ray":
        from rlvr.assembly.on_ray import train_on_ray

        summary = train_on_ray(cfg)
    else:
        from rlvr.assembly import train

        summary = train(cfg)
    wall = time.time() - t0
    rows = [r for r in read_jsonl(base / name / "metrics.jsonl") if "perf/step_s" in r]
    loop_s = sum(r["perf/step_s"] for r in rows)
    out = {
        "status": summary["status"],
        "steps": len(rows),
        "steps_per_s": len(rows) / loop_s,
        "loop_s": round(loop_s, 2),
        "wall_s": round(wall, 2),
        "eval_after": summary["eval_after"]["accuracy"],
        "eval_before": summary["eval_before"]["accuracy"],
        "reward_mean": mean(rows, "reward/mean"),
    }
    if "perf/staleness_max" in rows[-1]:
        out["staleness_max"] = max(r["perf/staleness_max"] for r in rows)
        out["staleness_mean"] = mean(rows, "perf/staleness_mean")
        out["trainer_idle_s_mean"] = mean(rows, "perf/trainer_idle_s")
    if "perf/token_staleness_mean" in rows[-1]:
        out["token_staleness_mean"] = mean(rows, "perf/token_staleness_mean")
        out["partial_frac_mean"] = mean(rows, "rollout/partial_frac")
        out["weights_taken_midway"] = sum(r["rollout/weights_taken_midway"] for r in rows)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default="bench/ray_results.json")
    ap.add_argument("--dir", default="runs/bench_ray")
    ap.add_argument("--config", help="a config file under the overrides (default: the built-in default)")
    ap.add_argument("--modes", default="embedded,ray_sync,ray_async", help=f"of {', '.join(MODES)}, in order")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"--modes: unknown {unknown}; choose from {', '.join(MODES)}")
    common = [
        f"train.steps={args.steps}",
        "eval.every=0",
        "ckpt.every=0",
        "run.progress=false",
        "log.tensorboard=false",
        "log.report=false",
        *args.overrides,
    ]
    base = Path(args.dir)
    results = {name: measure(name, args.config, common, base) for name in modes}
    for name, r in results.items():
        print(
            f"{name:17s} {r['steps_per_s']:.3f} steps/s  loop {r['loop_s']:7.1f}s  wall {r['wall_s']:7.1f}s  "
            f"held-out {r['eval_before']:.1%} -> {r['eval_after']:.1%}  "
            + (
                f"staleness mean {r['staleness_mean']:.2f} max {r['staleness_max']:.0f}  trainer idle "
                f"{r['trainer_idle_s_mean']:.2f}s/step  "
                if "staleness_max" in r
                else ""
            )
            + (
                f"per token {r['token_staleness_mean']:.2f}, trajectories on two versions {r['partial_frac_mean']:.1%}"
                if "token_staleness_mean" in r
                else ""
            )
        )
    ratios = {}
    for a, b in (("ray_async", "ray_sync"), ("ray_async", "embedded"), ("ray_async_partial", "ray_async")):
        if a in results and b in results:
            ratios[f"{a}_over_{b}"] = results[a]["steps_per_s"] / results[b]["steps_per_s"]
            ratios[f"{a}_minus_{b}_heldout_points"] = (results[a]["eval_after"] - results[b]["eval_after"]) * 100
    for key, value in ratios.items():
        print(f"{key} = {value:.2f}")
    results["ratios"] = ratios
    if "ray_async_partial" in results and "ray_async" in results:
        vs = paired(base, "ray_async_partial", "ray_async")
        print(
            f"held-out, partial vs whole-group: {vs['diff_points']:+.1f} points [{vs['ci95_points'][0]:+.1f}, "
            f"{vs['ci95_points'][1]:+.1f}], McNemar p = {vs['mcnemar_p']:.3g}"
        )
        results["partial_vs_whole_group"] = vs
    Path(args.out).write_text(
        json.dumps({"steps": args.steps, "config": args.config, "overrides": common, **results}, indent=2) + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
