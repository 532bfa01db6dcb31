"""A command agent's rollout, per episode against long-lived: the tool task's calculator agent in Node
(examples/node_agent.js) started once per episode (env.agent_protocol=once, at 32 and 256 episodes in
flight) and as long-lived processes (env.agent_protocol=lines, one per env.workers), beside the same
agent in Python run in the workers (examples/openai_agent.py:solve), all in one script.

    .venv/bin/python bench/bench_agent_command.py [--steps 3] [--json bench/agent_command_results.json]

Each is `rlvr train --config configs/agent_tool_arithmetic.yaml` (256 episodes a step) for --steps
steps from the same cached cold start; the figures are metrics.jsonl's time/rollout_s per step, the
most agent processes alive at once (sampled every 0.2 s) and the reward, which should agree.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
NODE = ["env.agent=", "env.agent_command=node examples/node_agent.js"]
CASES = {
    "node, a process per episode, 32 at once (the default)": [*NODE, "env.agent_protocol=once"],
    "node, a process per episode, 256 at once": [*NODE, "env.agent_protocol=once", "env.agent_concurrency=256"],
    "node, long-lived (env.agent_protocol=lines)": [*NODE, "env.agent_protocol=lines"],
    "python, in the workers (env.agent)": [],
}


def most_agents(stop: threading.Event, seen: list[int]) -> None:
    while not stop.is_set():
        n = 0
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            n += len(cmd) > 1 and cmd[0] == "node" and cmd[1].endswith("node_agent.js")
        seen.append(n)
        time.sleep(0.2)


def run(name: str, extra: list[str], steps: int) -> dict:
    run_dir = ROOT / "runs" / "bench-agent-command"
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [f"train.steps={steps}", "eval.n=16", "eval.every=0", "ckpt.every=0", "run.progress=false", *extra]
    stop, seen = threading.Event(), [0]
    watcher = threading.Thread(target=most_agents, args=(stop, seen), daemon=True)
    watcher.start()
    t0 = time.time()
    argv = [sys.executable, "-m", "rlvr.cli", "train", "--config", "configs/agent_tool_arithmetic.yaml"]
    subprocess.run([*argv, f"run.dir={run_dir}", *overrides], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    stop.set()
    watcher.join()
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps_ = [m for m in metrics if "time/rollout_s" in m]
    out = {
        "case": name,
        "overrides": overrides,
        "wall_s": round(time.time() - t0, 1),
        "rollout_s": [round(m["time/rollout_s"], 2) for m in steps_],
        "most_agent_processes": max(seen),
        "reward_correct_mean": [round(m["reward/correct/mean"], 3) for m in steps_],
        "env_error_frac": [m.get("rollout/env_error_frac", 0.0) for m in steps_],
    }
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", default=str(ROOT / "bench" / "agent_command_results.json"))
    args = parser.parse_args()
    results = [run(name, extra, args.steps) for name, extra in CASES.items()]
    machine = {
        "cpu": (Path("/proc/cpuinfo").read_text().split("model name")[1].split("\n")[0].strip(": ")),
        "cores": psutil.cpu_count(),
    }
    Path(args.json).write_text(
        json.dumps({"machine": machine, "date": time.strftime("%Y-%m-%d"), "results": results}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
