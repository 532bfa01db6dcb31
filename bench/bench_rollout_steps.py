"""Where a loop-engine rollout's time goes, step by step, and what its attention reads.

    .venv/bin/python bench/bench_rollout_steps.py --rows 128 --reps 3

1. The roofline's rollout (`bench_roofline.rollout`'s prompts: the config's problems, its G,
   temperature and length, SmolLM2-135M-Instruct, fp32, kernels pinned as `rlvr train` runs them),
   `--reps` times (the weights changed in place before each, as by an optimizer step, so the
   stepper packs them again as in training), timers around the stepper's calls: making the stepper (MKL packs the weights),
   the prefill, each decode step (its attention apart), sampling, the products (the LM head's apart;
   on MKL's path with the RMSNorms and gated units before them, timed apart too). Then the steps by how many rows
   were still decoding: ms per step and per row, attention's share.
2. The native decode attention alone (`rlvr.rollout.native.decode_attention`) over 30 layers of
   caches at the roofline's 128-row shape (SmolLM2: 9 query heads, 3 KV heads, D = 64; 32 prompts
   of 92 slots, G = 4), per number of generated tokens, against a strided read of the same bytes
   (the first half of each row and head's 32 kB, as the cache is read at 64 tokens of 128).

The host is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from rlvr.kernels import start_as_rlvr  # noqa: E402

start_as_rlvr()  # the kernels and allocator settings `rlvr train` runs with

import torch  # noqa: E402


def timed_calls(totals: dict, counts: dict, obj, name: str, key: str) -> None:
    """Wrap obj.name so its wall time adds up in totals[key]."""
    f = getattr(obj, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            totals[key] += time.perf_counter() - t0
            counts[key] += 1

    setattr(obj, name, wrapper)


def rollout_steps(rows: int, reps: int, threads: int) -> None:
    from bench_rollout import model_setup

    from rlvr.models import load_model
    from rlvr.rollout import SamplingParams, build_engine, decode, native, stepper

    torch.set_num_threads(threads)
    cfg, path, problems = model_setup("smollm2", threads)
    torch.set_num_threads(threads)
    model, tok = load_model(path, "float32")
    model.eval()
    g = cfg.rollout.group_size
    prompts = [problems[i % len(problems)] for i in range(max(1, rows // g))]
    engine = build_engine(
        dataclasses.replace(cfg.rollout, engine="loop"),
        model,
        tok,
        name="loop",
        model_dir=path,
        seed=0,
        dtype="float32",
    )
    params = SamplingParams(
        group_size=g, temperature=cfg.rollout.temperature, top_p=1.0, max_new_tokens=cfg.rollout.max_new_tokens
    )
    totals, counts = collections.defaultdict(float), collections.defaultdict(int)
    for obj, name, key in [
        (stepper.LlamaStepper, "__init__", "make stepper"),
        (stepper.LlamaStepper, "prefill", "prefill"),
        (decode, "sample_with_logprobs", "sample"),
        (native, "decode_attention", "attention"),
        (stepper._Linear, "__call__", "products"),
        (stepper.LlamaStepper, "_logits", "LM head"),
        (native, "layer_op", "norms and gates"),
    ]:
        timed_calls(totals, counts, obj, name, key)
    steps = []  # (rows, seconds, attention seconds)
    step = stepper.LlamaStepper.step

    def timed_step(self, tokens):
        a0, t0 = totals["attention"], time.perf_counter()
        out = step(self, tokens)
        steps.append((len(tokens), time.perf_counter() - t0, totals["attention"] - a0))
        return out

    stepper.LlamaStepper.step = timed_step
    engine.generate(prompts[:1], dataclasses.replace(params, max_new_tokens=4))  # warm-up
    for rep in range(reps):
        totals.clear(), steps.clear()
        with torch.no_grad():  # the weights changed in place, as by an optimizer step: packed again, as in training
            for param in model.parameters():
                param.mul_(1.0)
        torch.manual_seed(0)
        t0 = time.perf_counter()
        done = engine.generate(prompts, params)
        seconds = time.perf_counter() - t0
        tokens = sum(len(c.token_ids) for c in done)
        step_s = sum(s for _, s, _ in steps)
        print(
            f"rep {rep}: {tokens} tokens in {seconds:.2f} s = {tokens / seconds:.1f} tok/s; {len(steps)} steps "
            f"{step_s:.2f} s (attention {totals['attention']:.2f}), "
            + ", ".join(f"{k} {totals[k]:.2f}" for k in ("make stepper", "prefill", "sample"))
            + "; products "
            f"{totals['products']:.2f} (prefill's too; LM head {totals['LM head']:.2f}; with MKL, norms and gates "
            f"{totals['norms and gates']:.2f} inside)",
            flush=True,
        )
    buckets = collections.defaultdict(lambda: [0, 0, 0.0, 0.0])
    for n, s, a in steps:
        b = buckets[-(-n // 16) * 16]
        b[0], b[1], b[2], b[3] = b[0] + 1, b[1] + n, b[2] + s, b[3] + a
    print("last rep's steps by rows decoding:")
    for top in sorted(buckets):
        n, row_steps, s, a = buckets[top]
        print(
            f"  {top - 15:3d}-{top:3d} rows: {n:3d} steps, {1e3 * s / n:6.1f} ms a step (attention {1e3 * a / n:5.1f}), "
            f"{1e3 * s / row_steps:.3f} ms per row"
        )


def attention_alone(threads: int, generated: list[int]) -> None:
    from rlvr.rollout import native

    torch.set_num_threads(threads)
    lib = native.library()
    if lib is None:
        print("no native kernels on this machine")
        return
    rows, hq, hkv, d, max_new, plen, prompts, layers = 128, 9, 3, 64, 128, 92, 32, 30
    gen = torch.Generator().manual_seed(0)
    kc = [torch.randn(rows, hkv, max_new, d, generator=gen) for _ in range(layers)]
    vc = [torch.randn(rows, hkv, max_new, d, generator=gen) for _ in range(layers)]
    pk = [torch.randn(prompts, hkv, plen, d, generator=gen) for _ in range(layers)]
    pv = [torch.randn(prompts, hkv, plen, d, generator=gen) for _ in range(layers)]
    mask = torch.zeros(prompts, 1, 1, plen)
    mask[..., :10] = float("-inf")
    qkv = torch.randn(rows, hq + 2 * hkv, d, generator=gen)
    cos, sin = torch.randn(rows, d, generator=gen), torch.randn(rows, d, generator=gen)
    cache_of, prompt_of = torch.arange(rows), torch.arange(rows) // (rows // prompts)
    scratch = torch.empty(threads, native.scratch_size(hq // hkv, plen, max_new))

    def best(fn, reps=8):
        out = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            out = min(out, time.perf_counter() - t0)
        return out

    for t in generated:
        s = best(
            lambda t=t: [
                native.decode_attention(
                    lib, qkv, hq, cos, sin, kc[i], vc[i], t, cache_of, pk[i], pv[i], mask, prompt_of, d**-0.5, scratch
                )
                for i in range(layers)
            ]
        )
        own = rows * hkv * (t + 1) * d * 4 * 2 * layers
        print(
            f"attention, {t + 1:3d} generated tokens: {1e3 * s:5.1f} ms per {layers} layers "
            f"({own / 1e6:.0f} MB of own keys and values: {own / s / 1e9:.1f} GB/s if all of it)"
        )
    caches = torch.stack([torch.stack([k, v], 2) for k, v in zip(kc, vc)])  # (layers, rows, hkv, 2, max_new, d)
    s = best(lambda: caches[..., : max_new // 2, :].sum())
    print(
        f"strided read of the first half of every (row, head)'s keys and values: "
        f"{caches.numel() * 2 / s / 1e9:.1f} GB/s"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--generated", default="0,32,64,100", help="attention alone: generated tokens before the step")
    args = ap.parse_args()
    rollout_steps(args.rows, args.reps, args.threads)
    attention_alone(args.threads, [int(t) for t in args.generated.split(",")])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
