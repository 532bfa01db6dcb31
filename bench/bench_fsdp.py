"""FSDP2 on the CPU: 1 rank vs 2 ranks, the same policy updates, side by side in one run.

    .venv/bin/python bench/bench_fsdp.py [--hidden 512 --layers 8 --steps 5] [--json FILE]

Each configuration is a fresh torchrun group (gloo) that builds the same Llama (tiny
tokenizer, `--hidden` x `--layers`), samples one batch of completions, and times `--steps`
policy updates on it (each an optimizer step: forward, backward, reduce-scatter, AdamW). Per
rank it reports the median step time, the bytes of parameters, gradients and AdamW moments it
holds, and its peak RSS. On 2 cores the ranks share the cores, so no speed-up is expected: the
memory per rank is the point (the training state is split in two).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def worker(args) -> None:
    """One rank (or the single process): build, sample, time the updates, write a JSON line."""
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import split_settings

    from rlvr.config import load_config
    from rlvr.models import load_policy
    from rlvr.models.tiny import save_tiny
    from rlvr.records import Problem
    from rlvr.rollout import HFEngine, SamplingParams
    from rlvr.train.memory import peak_memory, reset_peak_memory
    from rlvr.train.parallel import Parallel
    from rlvr.train.update import build_optimizer, policy_update

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("WORLD_SIZE", 1))))
    strategy = "fsdp" if "RANK" in os.environ else "single"
    cfg = load_config(None, [f"train.strategy={strategy}"])
    par = Parallel.create(cfg.train)
    model_dir = Path(args.dir) / "model"
    if par.main and not model_dir.exists():
        save_tiny(model_dir, hidden=args.hidden, layers=args.layers, heads=8, seed=0)
    par.barrier()
    model, tok = load_policy(cfg.model, model_dir)
    torch.manual_seed(0)  # the same batch on every rank and in both configurations
    problems = [Problem(id=f"p{i}", prompt=f"{i}+{i + 7}=", answer=str(2 * i + 7)) for i in range(args.prompts)]
    completions = HFEngine(model, tok).generate(problems, SamplingParams(group_size=8, max_new_tokens=32))
    advantages = torch.randn(len(completions))
    model = par.shard(model)
    opt = build_optimizer(cfg.train, model)
    settings = split_settings(
        dict(
            ppo_epochs=1,
            mini_batches=1,
            micro_batch_size=16,
            max_grad_norm=1.0,
            temperature=1.0,
            loss_type="token_mean",
        )
    )
    times = []
    reset_peak_memory()
    for i in range(args.steps + 1):  # the first step allocates the AdamW moments: not timed
        par.barrier()
        t0 = time.perf_counter()
        policy_update(
            model,
            opt,
            completions,
            advantages,
            torch.ones(len(completions)),
            None,
            tok.pad_token_id,
            settings,
            generator=torch.Generator().manual_seed(i),
            par=par,
        )
        par.barrier()
        if i:
            times.append(time.perf_counter() - t0)
    params = list(model.parameters())
    row = {
        "world": par.world,
        "rank": par.rank,
        "step_s": sorted(times)[len(times) // 2],
        "param_mb": _local_bytes(params) / 2**20,
        "grad_mb": _local_bytes(p.grad for p in params if p.grad is not None) / 2**20,
        "adam_mb": _local_bytes(v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim())
        / 2**20,
        "peak_rss_gb": peak_memory()["perf/peak_rss_gb"],
        "sequences": len(completions),
        "params_total": sum(p.numel() for p in load_policy(cfg.model, model_dir)[0].parameters()),
    }
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    par.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.jsonl"
        own = [
            str(Path(__file__).resolve()),
            "--worker",
            "--dir",
            tmp,
            "--out",
            str(out),
            "--hidden",
            str(args.hidden),
            "--layers",
            str(args.layers),
            "--prompts",
            str(args.prompts),
            "--steps",
            str(args.steps),
        ]
        subprocess.run([sys.executable, *own], check=True, cwd=ROOT)
        subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *own],
            check=True,
            cwd=ROOT,
        )
        rows = [json.loads(x) for x in out.read_text().splitlines()]
    rows.sort(key=lambda r: (r["world"], r["rank"]))
    print(f"model: {rows[0]['params_total'] / 1e6:.1f}M parameters, {rows[0]['sequences']} sequences per update")
    print(
        f"{'ranks':>5} {'rank':>4} {'step s':>7} {'params MB':>9} {'grads MB':>8} {'AdamW MB':>8} {'peak RSS GB':>11}"
    )
    for r in rows:
        print(
            f"{r['world']:>5} {r['rank']:>4} {r['step_s']:>7.3f} {r['param_mb']:>9.1f} {r['grad_mb']:>8.1f} "
            f"{r['adam_mb']:>8.1f} {r['peak_rss_gb']:>11.3f}"
        )
    one = next(r for r in rows if r["world"] == 1)
    two = [r for r in rows if r["world"] == 2]
    state = lambda r: r["param_mb"] + r["grad_mb"] + r["adam_mb"]  # noqa: E731
    print(
        f"training state per rank: 2 ranks {max(state(r) for r in two):.1f} MB vs 1 rank {state(one):.1f} MB "
        f"({max(state(r) for r in two) / state(one):.2f}x); step time 2 ranks / 1 rank "
        f"{max(r['step_s'] for r in two) / one['step_s']:.2f}x"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
