"""Sampling replay's parity, measured: every sampled token's recorded log-prob against the trainer's
recomputation, replayed over its kept set and (as before replay) over the whole vocabulary.

    .venv/bin/python bench/bench_replay_parity.py [--json bench/replay_parity_results.json]

The tiny model of tests/test_sampling_replay.py (its final norm x6: sharper distributions, so each
truncation cuts real mass), fp32, 4 prompts x 8 samples x 32 tokens at temperature 1.0; the loop
and hf engines, and vLLM's CPU build where installed; top_p=0.9, top_k=20 and min_p=0.05 each.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

RULES = {"top_p=0.9": {"top_p": 0.9}, "top_k=20": {"top_k": 20}, "min_p=0.05": {"min_p": 0.05}}


def main() -> None:
    from rlvr.algos.truncation import ReplayStats, Truncation
    from rlvr.models import load_model
    from rlvr.models.tiny import save_tiny
    from rlvr.records import Problem
    from rlvr.rollout import HFEngine, LoopEngine, SamplingParams
    from rlvr.scoring import completion_logprobs

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    path = Path(tempfile.mkdtemp())
    save_tiny(path, hidden=64, layers=2, heads=2, seed=0)  # head size 32: vLLM's CPU attention needs it
    model, tok = load_model(path)
    with torch.no_grad():
        model.model.norm.weight.mul_(6.0)
    model.eval()
    engines = {"loop": lambda: LoopEngine(model, tok), "hf": lambda: HFEngine(model, tok)}
    try:
        from rlvr.rollout.vllm_engine import VLLMEngine

        def vllm():
            engine = VLLMEngine(path, tok, dtype="float32", seed=0)
            engine.load_weights(model.state_dict().items(), 1)
            return engine

        engines["vllm"] = vllm
    except ImportError:
        pass
    problems = [Problem(id=str(i), prompt=f"{i}+{i + 3}=") for i in range(4)]
    rows = []
    for name, make in engines.items():
        engine = make()
        for label, kw in RULES.items():
            torch.manual_seed(0)
            out = engine.generate(problems, SamplingParams(group_size=8, temperature=1.0, max_new_tokens=32, **kw))
            rule = Truncation(**kw, order="vllm" if name == "vllm" else "hf")
            stats = ReplayStats()
            replayed = completion_logprobs(model, out, tok.pad_token_id, 1.0, truncation=rule, replay_stats=stats)
            whole = completion_logprobs(model, out, tok.pad_token_id, 1.0)

            def gap(trainer):
                return max(
                    float((trainer[i, : len(c.logprobs)] - torch.tensor(c.logprobs)).abs().max())
                    for i, c in enumerate(out)
                )

            row = {
                "engine": name,
                "truncation": label,
                "tokens": sum(len(c.token_ids) for c in out),
                "replayed_gap_max": gap(replayed),
                "whole_vocabulary_gap_max": gap(whole),
                "set_mismatch": stats.set_mismatch,
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
        del engine
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
