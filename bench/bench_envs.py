"""The agent tasks measured: tool_arithmetic and FrozenLake before/after on held-out problems (paired
test), Breakout's mean episode return against a random policy's, rising over training, and the
inverted pendulum's held-out returns before and after against a random policy's on the same seeds.

    .venv/bin/python bench/bench_envs.py [--tasks tool_arithmetic,frozenlake,breakout,breakout_long,inverted_pendulum] [--json bench/envs_results.json]

Each task is a plain `rlvr train --config configs/<task>.yaml` in a fresh interpreter (its cold start
included, cached under .cache/sft like any run); the figures come from its run directory:
summary.json's eval_before/eval_after/eval_change (exact McNemar on the same held-out problems), and
for Breakout metrics.jsonl's rollout/episode_return_mean per step, plotted with the random policy's
mean return over the same episodes (one ball, env.max_turns turns) as bench/<task>_return.png, and
the cold start's and the trained policy's held-out returns, greedy and sampled (`rlvr eval`). For
the pendulum, eval.jsonl's per-episode returns (greedy, held-out seeds) at the first and last
evaluation and a uniformly random force's on the same seeds, paired (sign-flip test), and the
sampled return per step as bench/inverted_pendulum_return.png.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def train(task: str, extra: list[str]) -> dict:
    run_dir = ROOT / "runs" / f"bench-{task}"
    t0 = time.time()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rlvr.cli",
            "train",
            "--config",
            str(ROOT / "configs" / f"{task}.yaml"),
            f"run.dir={run_dir}",
            "run.progress=false",
            *extra,
        ],
        check=True,
        cwd=ROOT,
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        "task": task,
        "command": f"rlvr train --config configs/{task}.yaml",
        "wall_s": round(time.time() - t0, 1),
        "before": summary["eval_before"],
        "after": summary["eval_after"],
        "change": summary["eval_change"],
        "run_dir": str(run_dir),
        "metrics": metrics,
    }


def random_breakout(episodes: int, turns: int, seed: int = 0) -> list[float]:
    """Returns of a policy that picks L, R or N uniformly, one ball, `turns` turns at most."""
    from rlvr.envs.gym import Breakout
    from rlvr.records import Problem

    rng, out = random.Random(seed), []
    for k in range(episodes):
        env = Breakout(max_turns=turns)
        env.reset(Problem(id=str(k), prompt=""), k)
        for _ in range(turns):
            if env.step(rng.choice("LRN")).done:
                break
        out.append(env.total)
        env.close()
    return out


def breakout_returns(run_dir: Path, task: str, turns: int, samples: int = 4) -> dict:
    """The cold start's and the trained policy's returns on the held-out episodes (`rlvr eval`): the
    greedy one (ALE is deterministic and every episode starts from the same serve, so it is one game)
    and `samples` sampled at T=1.0 per episode, as training samples them, at the preset's turns and at
    twice as many; the sampled ones of the two policies compared (bootstrap interval of the difference
    of means, sign-flip test; the episodes are independent draws, paired in their order)."""
    from rlvr.stats import paired_bootstrap, sign_flip_p

    start = json.loads((run_dir / "summary.json").read_text())["start_from"]
    out: dict = {}
    for label, model in (("cold_start", start), ("trained", str(run_dir))):
        for t in (turns, 2 * turns):
            report = run_dir / f"eval_{label}_{t}.json"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "rlvr.cli",
                    "eval",
                    model,
                    "--config",
                    str(ROOT / "configs" / f"{task}.yaml"),
                    "--samples",
                    str(samples),
                    "--temperature",
                    "1.0",
                    "--k",
                    "1",
                    "--out",
                    str(report),
                    f"env.max_turns={t}",
                ],
                check=True,
                cwd=ROOT,
            )
            problems = json.loads(report.read_text())["problems"]
            sampled = [r for p in problems for r in p["returns"]]
            out[f"{label}_{t}"] = {
                "greedy": sum(p["greedy_return"] for p in problems) / len(problems),
                "sampled": sum(sampled) / len(sampled),
                "sampled_returns": sampled,
            }
    for t in (turns, 2 * turns):
        a, b = out[f"cold_start_{t}"]["sampled_returns"], out[f"trained_{t}"]["sampled_returns"]
        out[f"sampled_change_{t}"] = {"diff_ci95": paired_bootstrap(a, b)[1:], "sign_flip_p": sign_flip_p(a, b)}
    return out


def random_pendulum(seeds: list[int], turns: int, seed: int = 0) -> list[float]:
    """Returns of a policy that pushes with a uniformly random force in [-3, 3], on these seeds."""
    from rlvr.envs.control import InvertedPendulum
    from rlvr.records import Problem

    rng, out = random.Random(seed), []
    for s in seeds:
        env = InvertedPendulum(max_turns=turns)
        env.reset(Problem(id=str(s), prompt=""), s)
        for _ in range(turns):
            if env.step(f"{rng.uniform(-3, 3):+.1f}").done:
                break
        out.append(env.total)
        env.close()
    return out


def pendulum_figures(run_dir: Path, metrics: list[dict]) -> dict:
    """Held-out greedy returns at the first and last evaluation, a random policy's on the same seeds,
    paired sign-flip tests; the learning curve plotted."""
    from rlvr.config import load_config
    from rlvr.stats import paired_bootstrap, sign_flip_p

    rows = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    first, last = min(r["step"] for r in rows), max(r["step"] for r in rows)
    before = {r["id"]: r["return"] for r in rows if r["step"] == first}
    after = {r["id"]: r["return"] for r in rows if r["step"] == last}
    ids = sorted(before)
    turns = load_config(ROOT / "configs" / "inverted_pendulum.yaml").env.max_turns
    rand = random_pendulum([int(i.rsplit(":", 1)[1]) for i in ids], turns)
    a, b = [before[i] for i in ids], [after[i] for i in ids]
    out = {
        "episodes": len(ids),
        "turns": turns,
        "return_before": sum(a) / len(a),
        "return_after": sum(b) / len(b),
        "return_random": sum(rand) / len(rand),
        "after_vs_before": {"diff_ci95": paired_bootstrap(a, b)[1:], "sign_flip_p": sign_flip_p(a, b)},
        "after_vs_random": {"diff_ci95": paired_bootstrap(rand, b)[1:], "sign_flip_p": sign_flip_p(rand, b)},
        "success_after": sum(x >= turns for x in b) / len(b),
        "success_before": sum(x >= turns for x in a) / len(a),
    }
    plot_returns(
        metrics,
        out["return_random"],
        ROOT / "bench" / "inverted_pendulum_return.png",
        "InvertedPendulum (MuJoCo) as text: the tiny model",
        f"steps balanced (of {turns})",
    )
    return out


def plot_breakout(metrics: list[dict], baseline: float, path: Path, turns: int) -> None:
    plot_returns(
        metrics, baseline, path, f"Breakout from RAM: the tiny model, one ball, {turns} turns", "bricks per episode"
    )


def plot_returns(metrics: list[dict], baseline: float, path: Path, title: str, ylabel: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [m for m in metrics if "rollout/episode_return_mean" in m]
    steps = [m["step"] for m in rows]
    returns = [m["rollout/episode_return_mean"] for m in rows]
    window = 5
    smooth = [
        sum(returns[max(0, i - window + 1) : i + 1]) / len(returns[max(0, i - window + 1) : i + 1])
        for i in range(len(returns))
    ]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(steps, returns, alpha=0.35, label="mean episode return (sampled, per step)")
    ax.plot(steps, smooth, label=f"moving mean of {window} steps")
    ax.axhline(baseline, color="gray", linestyle="--", label=f"random policy ({baseline:.2f})")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="tool_arithmetic,frozenlake,breakout")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "envs_results.json")
    ap.add_argument("overrides", nargs="*", help="key=value for every run")
    args = ap.parse_args()
    out = json.loads(args.json.read_text()) if args.json.exists() else {}
    for task in args.tasks.split(","):
        res = train(task, args.overrides)
        metrics = res.pop("metrics")
        if task.startswith("breakout"):
            from rlvr.config import load_config

            turns = load_config(ROOT / "configs" / f"{task}.yaml").env.max_turns
            rand = random_breakout(64, turns)
            res["random_return_mean"] = sum(rand) / len(rand)
            curve = [m["rollout/episode_return_mean"] for m in metrics if "rollout/episode_return_mean" in m]
            res["return_first10"] = sum(curve[:10]) / max(1, len(curve[:10]))
            res["return_last10"] = sum(curve[-10:]) / max(1, len(curve[-10:]))
            plot_breakout(metrics, res["random_return_mean"], ROOT / "bench" / f"{task}_return.png", turns)
            res["held_out_returns"] = breakout_returns(Path(res["run_dir"]), task, turns)
        elif task == "inverted_pendulum":
            res.update(pendulum_figures(Path(res["run_dir"]), metrics))
        else:
            calls = [m.get("eval/tool_calls_per_solved") for m in metrics if "eval/tool_calls_per_solved" in m]
            if calls:
                res["tool_calls_per_solved_after"] = calls[-1]
        res["date"] = time.strftime("%Y-%m-%d")
        out[task] = res
        print(json.dumps(res, indent=1), flush=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
