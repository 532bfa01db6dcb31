"""What the environment boundary costs, side by side in one run.

    .venv/bin/python bench/bench_env_harness.py [--reps 5] [--json bench/env_harness_results.json]

1. isolation: the built-in environments' rollouts with env.isolation=thread (how they run by
   default) and env.isolation=process (worker processes, as a user's environment runs), alternated
   rep by rep: 64 episodes (8 problems x G=8) of FrozenLake (12 turns) and of the tool task's
   calculator episodes (4 turns), the policy replaced by a scripted sampler so that only the
   environments' time is measured; the difference per environment call is the boundary's cost.
2. faults: the same short `rlvr train` (tiny model, 1-digit sums, 6 steps, env.step_timeout_s=1)
   with tests/hostile.py's Steady environment and its Flaky twin (raises on a third of the
   episodes, hangs on a tenth, a NaN component on another tenth), one after the other: wall times
   and the ratio; then the same with four turns an episode, Patient against HangsLater (hangs on
   one step in eight, at any turn): each step's rollout time against Patient's, which hung
   episodes should lengthen by at most one env.step_timeout_s for each sampling round (dynamic
   sampling's rounds run one after the other), however many turns hang.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

TINY = [
    "task.min_digits=1",
    "task.max_digits=1",
    "model.tiny_hidden=32",
    "model.tiny_layers=2",
    "model.tiny_heads=2",
    "sft.steps=80",
    "sft.batch_size=16",
    "sft.examples=1000",
    "sft.lr=1e-2",
    "sft.warmup=20",
    "sft.teacher_error=0.0",
    "rollout.batch_size=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=32",
    "eval.n=8",
    "eval.every=0",
    "train.threads=1",
    "run.progress=false",
    "log.tensorboard=false",
    "train.steps=6",
    "ckpt.every=0",
    "env.step_timeout_s=1",
]


class Scripted:
    """Writes the same turn every time: the environments are what is timed."""

    def __init__(self, text: str) -> None:
        from rlvr.models.tiny import build_tokenizer

        self.tokenizer, self.version = build_tokenizer(code_chars=True, tool_tags=True), 0
        self.ids = self.tokenizer(text, add_special_tokens=False).input_ids

    def sample(self, contexts, params, group_size):
        eos = self.tokenizer.eos_token_id
        return [(self.ids + [eos], [0.0] * (len(self.ids) + 1), "stop") for _ in contexts for _ in range(group_size)]


def isolation(reps: int) -> dict:
    from rlvr.config import load_config
    from rlvr.records import Problem
    from rlvr.rollout import SamplingParams
    from rlvr.assembly import episode_spec
    from rlvr.rollout.episodes import run_episodes

    cases = {
        "frozenlake": (["env.name=frozenlake", "task.name=frozenlake"], "R"),
        "tools": (
            ["env.name=tools", "env.tools=[calculator]", "env.tool_format=compact"],
            "<tool_call>calculator(482193*3951)</tool_call>",
        ),
    }
    params = SamplingParams(group_size=8, max_new_tokens=64)
    out = {}
    for name, (overrides, turn) in cases.items():
        sampler = Scripted(turn)
        problems = [Problem(id=f"p{k}", prompt="1+1=", metadata={"seed": k}) for k in range(8)]
        specs = {
            mode: episode_spec(load_config(None, [*overrides, f"env.isolation={mode}"]))
            for mode in ("thread", "process")
        }
        times: dict[str, list[float]] = {"thread": [], "process": []}
        calls = 0
        for _ in range(reps + 1):  # the first rep warms both up (worker start, imports): not counted
            for mode, spec in specs.items():
                t0 = time.perf_counter()
                done = run_episodes(sampler, problems, params, spec)
                times[mode].append(time.perf_counter() - t0)
                calls = sum(sum(t.role == "assistant" for t in c.turns) for c in done) + 2 * len(
                    done
                )  # steps, open, close
        thread, process = (statistics.median(times[m][1:]) for m in ("thread", "process"))
        out[name] = {
            "episodes": len(problems) * 8,
            "env_calls": calls,
            "thread_s": round(thread, 4),
            "process_s": round(process, 4),
            "overhead_per_call_us": round((process - thread) / calls * 1e6, 1),
            "ratio": round(process / thread, 2),
        }
        specs["process"].host.shutdown()
        print(name, out[name], flush=True)
    return out


def faults() -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
        common = [*TINY, f"sft.cache_dir={tmp}/sft"]
        subprocess.run(
            [sys.executable, "-m", "rlvr.cli", "sft", *common], env=env, cwd=ROOT, capture_output=True, check=True
        )  # the cold start both runs then find cached
        for name in ("Steady", "Flaky", "Patient", "HangsLater"):
            run_dir = Path(tmp) / name
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "rlvr.cli", "train", *common, f"env.name=hostile:{name}", f"run.dir={run_dir}"],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - t0
            summary = json.loads((run_dir / "summary.json").read_text())
            rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            errors = [r["rollout/env_error_frac"] for r in rows if "rollout/env_error_frac" in r]
            out[name] = {
                "exit_code": proc.returncode,
                "status": summary["status"],
                "process_wall_s": round(wall, 2),
                "run_wall_time_s": summary["wall_time_s"],
                "env_error_frac_mean": round(statistics.mean(errors), 3) if errors else 0.0,
                "rollout_s": [round(r["time/rollout_s"], 2) for r in rows if "time/rollout_s" in r],
                "sampling_rounds": [1 + int(r["rollout/extra_rounds"]) for r in rows if "time/rollout_s" in r],
            }
            print(name, out[name], flush=True)
    out["ratio_process_wall"] = round(out["Flaky"]["process_wall_s"] / out["Steady"]["process_wall_s"], 2)
    out["ratio_run_wall_time"] = round(out["Flaky"]["run_wall_time_s"] / out["Steady"]["run_wall_time_s"], 2)
    extra = [h - p for h, p in zip(out["HangsLater"]["rollout_s"], out["Patient"]["rollout_s"])]
    out["hangs_later_most_extra_rollout_s"] = round(max(extra), 2)  # against env.step_timeout_s=1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "env_harness_results.json")
    args = parser.parse_args()
    import platform

    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "host": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "isolation": isolation(args.reps),
        "faults": faults(),
    }
    print(json.dumps(result["faults"], indent=1))
    args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
