"""`rlvr plan`'s memory figure against the peak memory runs measured on this machine.

    .venv/bin/python bench/bench_plan.py RUN_DIR [RUN_DIR ...] [--json bench/plan_results.json]

For each finished run: its config (RUN_DIR/config.yaml), the longest rendered prompt of its
held-out problems as the prompt length, the plan's one-process figure (every pool embedded, as the
run was) and the run's measured peak resident memory (the largest perf/peak_rss_gb of its steps,
ru_maxrss of the process, evaluation included), and their ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def check(run_dir: Path) -> dict:
    import yaml

    from rlvr.assembly import base_model_path, run_task
    from rlvr.cli.plan import run_plan
    from rlvr.config import load_config
    from rlvr.models import load_tokenizer
    from rlvr.plan import Cluster, shape_of
    from rlvr.rollout import render_prompt
    from rlvr.runlog import read_jsonl

    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    saved.pop("sources", None)
    saved.pop("secrets", None)
    tmp = run_dir / ".plan-config.yaml"
    tmp.write_text(yaml.safe_dump(saved))
    try:
        cfg = load_config(tmp, [])
    finally:
        tmp.unlink()
    base = base_model_path(cfg)
    tok = load_tokenizer(base)
    prompt = max(len(render_prompt(tok, p)) for p in run_task(cfg).held_out())
    result = run_plan(cfg, shape_of(base), Cluster(), prompt_len=prompt)
    measured = max(r["perf/peak_rss_gb"] for r in read_jsonl(run_dir / "metrics.jsonl") if "perf/peak_rss_gb" in r)
    planned = result["embedded_process_gb"]
    return {
        "run": str(run_dir),
        "model_params": result["model"]["params"],
        "prompt_len": prompt,
        "planned_gb": round(planned, 3),
        "measured_peak_rss_gb": round(measured, 3),
        "planned_over_measured": round(planned / measured, 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = [check(r) for r in args.runs]
    for r in rows:
        print(
            f"{r['run']}: planned {r['planned_gb']:.2f} GiB, measured {r['measured_peak_rss_gb']:.2f} GiB "
            f"(x{r['planned_over_measured']:.2f}; prompt {r['prompt_len']} tokens)"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"date": time.strftime("%Y-%m-%d"), "command": " ".join(["python", *sys.argv]), "runs": rows}, indent=1
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
