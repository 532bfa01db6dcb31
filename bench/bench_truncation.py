"""What truncated sampling costs the loop engine, side by side in one run.

    .venv/bin/python bench/bench_truncation.py [--models tiny smollm2] [--rows 16 128] [--rounds 3]
                                               [--max-new-tokens 64] [--threads 2] [--json FILE]

Per model (the default run's tiny model; SmolLM2-135M-Instruct, `make smollm2`) and rows (prompts x
G, G = the config's): the loop engine samples untruncated, then with `top_p=0.9`, `top_k=20` and
`min_p=0.05` (each recording its kept sets for sampling replay: rlvr.algos.truncation), round after
round in turn (the same seed for each in a round), after one warm-up each. Completion tokens per
second over all rounds, and the ratio of each truncation's to the untruncated (1.05 = 5% slower).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

SETTINGS = {"none": {}, "top_p=0.9": {"top_p": 0.9}, "top_k=20": {"top_k": 20}, "min_p=0.05": {"min_p": 0.05}}


def bench_model(name: str, args) -> list[dict]:
    from bench_rollout import model_setup

    from rlvr.models import load_model
    from rlvr.rollout import LoopEngine, SamplingParams

    cfg, path, held_out = model_setup(name, args.threads)
    torch.set_num_threads(args.threads)
    model, tok = load_model(path, cfg.model.dtype)
    engine = LoopEngine(model, tok)
    g = cfg.rollout.group_size
    rows_out = []
    for rows in args.rows:
        problems = [held_out[i % len(held_out)] for i in range(max(1, rows // g))]
        params = {
            label: SamplingParams(
                group_size=g, temperature=cfg.rollout.temperature, max_new_tokens=args.max_new_tokens, **kw
            )
            for label, kw in SETTINGS.items()
        }
        totals = {label: [0, 0.0] for label in SETTINGS}
        for p in params.values():
            engine.generate(problems[:1], p)  # warm-up
        for r in range(args.rounds):
            for label, p in params.items():
                torch.manual_seed(r)
                t0 = time.perf_counter()
                out = engine.generate(problems, p)
                totals[label][1] += time.perf_counter() - t0
                totals[label][0] += sum(len(c.token_ids) for c in out)
        base = totals["none"][0] / totals["none"][1]
        for label, (tokens, seconds) in totals.items():
            row = {
                "model": name,
                "rows": len(problems) * g,
                "truncation": label,
                "tokens": tokens,
                "seconds": round(seconds, 2),
                "tok_s": round(tokens / seconds, 1),
                "cost_vs_untruncated": round(base / (tokens / seconds), 3),
            }
            print(json.dumps(row), flush=True)
            rows_out.append(row)
    return rows_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny"])
    ap.add_argument("--rows", nargs="+", type=int, default=[16, 128])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = [row for name in args.models for row in bench_model(name, args)]
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
