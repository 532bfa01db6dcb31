"""What one decode step of the loop engine costs by its number of rows, and how much of it is GEMM.

    .venv/bin/python bench/bench_decode_rows.py --rows 1,2,4,8,12,16 --threads 2

For each row count: the lean forward (`LlamaStepper.step`) on SmolLM2-135M-Instruct with every row
kept decoding (ms per step, after warm-up), then the GEMMs alone over the model's own weights (the
products a step makes, one pass: q/k/v fused, o, gate/up fused, down, the LM head), row-major
activations, on the plain weights (F.linear: MKL), on MKL's packed GEMM over weights packed once
(where torch has it) and on rlvr's skinny GEMM (rlvr.rollout.native, where it builds; the stepper's
choice for a decode of at most native.SKINNY_ROWS rows); and MKL's packed GEMM again with every
layer's products over the first layer's weights (`in cache`: 14 MB of the 430 MB body read from
memory, the LM head as it is): the packed column minus this one is what reading the weights costs
where MKL does not hide it behind its arithmetic. A 1-row step shows what streaming the weights costs
here; the step minus the stepper's GEMM pass is what the small per-layer operations and attention
cost. All measured in the same process, interleaved per row count: the host is shared and noisy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from rlvr.kernels import start_as_rlvr  # noqa: E402

start_as_rlvr()  # the kernels and allocator settings `rlvr train` runs with (RLVR_NATIVE_KERNELS=1: the CPU's own kernels)

import torch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,4,8,12,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=15, help="timed steps per row count")
    args = ap.parse_args()

    from bench_rollout import model_setup
    from bench_roofline import timed
    from transformers import AutoModelForCausalLM

    from rlvr.models import load_tokenizer
    from rlvr.rollout.engine import render_prompt
    from rlvr.rollout import native
    from rlvr.rollout.stepper import LlamaStepper

    torch.set_num_threads(args.threads)
    _, path, problems = model_setup("smollm2", args.threads)
    tok = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompt = render_prompt(tok, problems[0])

    def products(stepper):  # the products a step makes, as the stepper holds them
        groups = (stepper.qkv, stepper.o, stepper.gate_up, stepper.down)
        return [lin for group in groups for lin in group] + [stepper.head]

    linears = products(LlamaStepper(model, 1))  # MKL packed, where torch has it
    narrow = products(LlamaStepper(model, 1, rows=native.SKINNY_ROWS)) if native.library() is not None else None
    layers = model.model.layers
    groups = (
        [(la.self_attn.q_proj, la.self_attn.k_proj, la.self_attn.v_proj) for la in layers]
        + [(la.self_attn.o_proj,) for la in layers]
        + [(la.mlp.gate_proj, la.mlp.up_proj) for la in layers]
        + [(la.mlp.down_proj,) for la in layers]
        + [(model.lm_head,)]
    )
    plain = [torch.cat([m.weight.detach() for m in group]) for group in groups]  # as `linears`, not reordered
    flop_per_row = sum(2 * w.numel() for w in plain)
    print(
        f"threads {args.threads}, {len(plain)} weights, {sum(w.numel() for w in plain) * 4 / 1e6:.0f} MB, "
        f"MKL packed weights: {linears[-1].packed is not None}, skinny GEMM: {narrow is not None}"
    )
    n = len(layers)  # products per kind: q/k/v, o, gate/up, down; then the head
    cached = [linears[i // n * n] for i in range(4 * n)] + [linears[-1]]  # the first layer's, each time
    print(
        f"{'rows':>4} {'step ms':>8} {'GEMM ms plain':>14} {'MKL packed':>11} {'in cache':>9} {'skinny':>7} "
        f"{'rest ms':>8} {'GEMM GFLOP/s':>13}"
    )
    with torch.no_grad():
        for rows in (int(r) for r in args.rows.split(",")):
            stepper = LlamaStepper(model, args.steps + 8, rows=rows)
            stepper.prefill([prompt], tok.pad_token_id)
            stepper.repeat(rows)
            tokens = torch.full((rows,), 100, dtype=torch.long)
            for _ in range(3):
                stepper.step(tokens)
            step = 1e3 * timed(lambda st=stepper, t=tokens: st.step(t), min_s=0, min_reps=args.steps - 1)
            xs = {k: torch.randn(rows, k) for k in {w.shape[1] for w in plain}}
            mkl = 1e3 * timed(lambda xs=xs: [torch.nn.functional.linear(xs[w.shape[1]], w) for w in plain], min_s=0)
            packed = 1e3 * timed(lambda xs=xs: [lin(xs[w.shape[1]]) for lin, w in zip(linears, plain)], min_s=0)
            hot = 1e3 * timed(lambda xs=xs: [lin(xs[w.shape[1]]) for lin, w in zip(cached, plain)], min_s=0)
            thin = (
                1e3 * timed(lambda xs=xs: [lin(xs[w.shape[1]]) for lin, w in zip(narrow, plain)], min_s=0)
                if narrow is not None
                else float("nan")
            )
            gemm = thin if stepper.head.skinny is not None else packed  # the one the step ran
            print(
                f"{rows:>4} {step:>8.1f} {mkl:>14.1f} {packed:>11.1f} {hot:>9.1f} {thin:>7.1f} {step - gemm:>8.1f} "
                f"{flop_per_row * rows / gemm / 1e6:>13.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
