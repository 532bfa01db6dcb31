"""A 1-GPU bf16 policy update: model FLOPs utilisation and peak device memory (not part of CI).

    python bench/gpu_update_mfu.py [--model smollm2] [--sequences 64 --prompt 128 --completion 512]
                                   [--steps 5] [--peak-tflops 989] [--json FILE]

The update is rlvr's own (`policy_update`, model.dtype=bfloat16: bf16 autocast over fp32 master
weights and fp32 AdamW state, log-probs in fp32) on `--sequences` completions of random tokens,
one optimizer step per call, on train.device=auto (CUDA when there is one). Model FLOPs per step
are counted as the forward + backward of every token: 6 x parameters x tokens, plus attention,
12 x layers x hidden x sequence length x tokens (PaLM, appendix B); MFU is the achieved FLOP/s
over `--peak-tflops` (H100/H200 SXM dense bf16: 989). `--device cpu --model tiny` checks the
script itself on a machine without a GPU (its MFU is meaningless without the CPU's peak).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2", help="smollm2, tiny, or a model directory")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--completion", type=int, default=512)
    ap.add_argument("--micro", type=int, default=16, help="sequences per forward/backward")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import split_settings

    from rlvr.config import load_config
    from rlvr.models import load_policy
    from rlvr.models.loading import resolve_model
    from rlvr.models.tiny import save_tiny
    from rlvr.records import Completion
    from rlvr.train.parallel import train_device
    from rlvr.train.update import build_optimizer, policy_update

    device = train_device(args.device)
    cfg = load_config(None, [f"model.name={args.model}"] if args.model != "tiny" else [])
    path = (
        save_tiny(ROOT / ".cache" / "mfu-tiny", hidden=256, layers=4, heads=4)
        if args.model == "tiny"
        else resolve_model(cfg.model)
    )
    model, tok = load_policy(cfg.model, path, device=device)
    c = model.config
    vocab = c.vocab_size
    g = torch.Generator().manual_seed(0)
    completions = [
        Completion(
            problem_id=f"p{i}",
            group_id=i // 8,
            index=i % 8,
            text="",
            prompt_ids=torch.randint(0, vocab, (args.prompt,), generator=g).tolist(),
            token_ids=torch.randint(0, vocab, (args.completion,), generator=g).tolist(),
            logprobs=[-float(torch.rand((), generator=g)) - 5.0] * args.completion,
            finish_reason="length",
        )
        for i in range(args.sequences)
    ]
    advantages = torch.randn(args.sequences, generator=g)
    opt = build_optimizer(cfg.train, model)
    settings = split_settings(
        dict(
            ppo_epochs=1,
            mini_batches=1,
            micro_batch_size=args.micro,
            max_grad_norm=1.0,
            temperature=1.0,
            loss_type="token_mean",
            dtype="bfloat16",
        )
    )
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(args.steps + 1):  # the first call allocates AdamW's moments (and warms the kernels)
        sync()
        t0 = time.perf_counter()
        policy_update(
            model,
            opt,
            completions,
            advantages,
            torch.ones(args.sequences),
            None,
            tok.pad_token_id,
            settings,
            generator=torch.Generator().manual_seed(i),
        )
        sync()
        if i:
            times.append(time.perf_counter() - t0)
    step_s = sorted(times)[len(times) // 2]
    params = sum(p.numel() for p in model.parameters())
    seq = args.prompt + args.completion
    tokens = args.sequences * seq
    flops = 6 * params * tokens + 12 * c.num_hidden_layers * c.hidden_size * seq * tokens
    row = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "model": str(args.model),
        "params_m": params / 1e6,
        "tokens_per_step": tokens,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "achieved_tflops": flops / step_s / 1e12,
        "mfu": flops / step_s / (args.peak_tflops * 1e12),
        "peak_device_gb": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
    }
    print(json.dumps(row, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
