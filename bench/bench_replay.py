"""Sampling replay against none, learning side by side: the default run and the tool task sampled
with top_p=0.9, the trainer scoring over each token's kept set (rollout.sampling_replay=true) or over
the whole vocabulary (false), everything else equal.

    .venv/bin/python bench/bench_replay.py [--tasks default,tool_arithmetic] [--top-p 0.9] [--json bench/replay_results.json]

Each arm is a plain `rlvr train` in a fresh interpreter (the cold start cached under .cache/sft, so
both arms start from the same weights), run directory runs/bench-replay-<task>-<arm>. Figures: each
arm's held-out accuracy before and after (summary.json), the two arms' final evaluations paired on
the same problems (rlvr.stats.paired_report: bootstrap interval, exact McNemar), and per step the
policy's entropy (actor/entropy) and the mean engine/trainer log-prob gap on the sampled tokens before
the update (rollout/parity_gap_mean), drawn for both arms in bench/replay_<task>.png. Without replay
each sampled token's gap is -log of the mass its position's truncation kept, which is the KL from
the distribution that sampled to the one the trainer scores, at that position: the curve is that KL
per token. `--from-runs` reads the run directories of an earlier invocation instead of training.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

ARMS = {"replay": "true", "no_replay": "false"}


def run_arm(task: str, arm: str, top_p: float, train: bool) -> dict:
    run_dir = ROOT / "runs" / f"bench-replay-{task}-{arm}"
    config = [] if task == "default" else ["--config", str(ROOT / "configs" / f"{task}.yaml")]
    overrides = [f"rollout.top_p={top_p}", f"rollout.sampling_replay={ARMS[arm]}"]
    t0 = time.time()
    if train:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "rlvr.cli",
                "train",
                *config,
                f"run.dir={run_dir}",
                "run.progress=false",
                *overrides,
            ],
            check=True,
            cwd=ROOT,
        )
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    last = max(r["step"] for r in evals)
    return {
        "command": " ".join(["rlvr train", *([f"--config configs/{task}.yaml"] if config else []), *overrides]),
        "wall_s": round(time.time() - t0, 1) if train else summary["wall_time_s"],
        "before": summary["eval_before"]["accuracy"],
        "after": summary["eval_after"]["accuracy"],
        "final": {r["id"]: float(r["correct"]) for r in evals if r["step"] == last},
        "curves": {
            key: [(r["step"], r[key]) for r in metrics if isinstance(r.get(key), (int, float))]
            for key in ("actor/entropy", "rollout/parity_gap_mean", "rollout/parity_gap_max", "reward/mean")
        },
    }


def plot(task: str, arms: dict[str, dict]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key, title in (
        (axes[0], "actor/entropy", "policy entropy (per token)"),
        (axes[1], "rollout/parity_gap_mean", "mean |log-prob gap| engine/trainer (no replay: the KL)"),
    ):
        for arm, result in arms.items():
            points = result["curves"][key]
            ax.plot([s for s, _ in points], [v for _, v in points], label=arm.replace("_", " "))
        ax.set_title(f"{task}: {title}", fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = ROOT / "bench" / f"replay_{task}.png"
    fig.savefig(path, dpi=110)
    return str(path.relative_to(ROOT))


def main() -> None:
    from rlvr.stats import paired_report

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="default,tool_arithmetic")
    ap.add_argument("--top-p", type=float, default=0.9)
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "replay_results.json")
    ap.add_argument("--from-runs", action="store_true", help="read the runs of an earlier invocation")
    args = ap.parse_args()
    results = json.loads(args.json.read_text()) if args.json.exists() else {}
    for task in args.tasks.split(","):
        arms = {arm: run_arm(task, arm, args.top_p, not args.from_runs) for arm in ARMS}
        ids = sorted(set(arms["replay"]["final"]) & set(arms["no_replay"]["final"]))
        paired = paired_report(
            [arms["no_replay"]["final"][i] for i in ids],
            [arms["replay"]["final"][i] for i in ids],
            alpha=0.05,
            iterations=10000,
            seed=0,
        )
        results[task] = {
            "top_p": args.top_p,
            "date": time.strftime("%Y-%m-%d"),
            "arms": {arm: {k: v for k, v in r.items() if k != "final"} for arm, r in arms.items()},
            "paired_final_eval": {"n": len(ids), "a": "no_replay", "b": "replay", **paired},
            "plot": plot(task, arms),
        }
        print(json.dumps({task: {k: v for k, v in results[task].items() if k != "arms"}}, indent=1), flush=True)
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
