"""The loop engine's decode loop of an earlier commit and of the working tree, side by side.

    .venv/bin/python bench/bench_decode_ab.py --rev 9ac273b --rows 128 --max-new-tokens 64 --reps 2

Loads `rlvr/rollout/decode.py` and `rlvr/rollout/stepper.py` (and `rlvr/kernels.py`, `rlvr/rollout/native.py`
and its C source where they exist)
as they were at `--rev` from git, then samples the same prompts (the config's held-out problems,
G = 4) with both, interleaved, same seed per repetition, on one loaded model; prints tokens/s of each
and their ratio per repetition. The host is shared and noisy: only the ratios within a repetition
mean anything.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from rlvr.kernels import start_as_rlvr  # noqa: E402

start_as_rlvr()  # the kernels and allocator settings `rlvr train` runs with (RLVR_NATIVE_KERNELS=1: the CPU's own kernels)

import torch  # noqa: E402


def decode_at(rev: str):
    """rlvr.rollout.decode.decode of commit `rev`, with the stepper of that commit."""
    folder = Path(tempfile.mkdtemp())
    files = (
        ("kernels", "kernels.py"),
        ("native", "rollout/native.py"),
        ("native.c", "rollout/native.c"),
        ("stepper", "rollout/stepper.py"),
        ("decode", "rollout/decode.py"),
    )
    for name, path in files:
        got = subprocess.run(["git", "show", f"{rev}:src/rlvr/{path}"], cwd=ROOT, capture_output=True, text=True)
        if got.returncode and name in ("kernels", "native", "native.c"):
            continue  # (older than rlvr.kernels or rlvr.rollout.native: its stepper does not import it)
        got.check_returncode()
        src = got.stdout.replace("from rlvr.rollout.stepper import", f"from stepper_{rev} import")
        src = src.replace("from rlvr.kernels import", f"from kernels_{rev} import")
        src = src.replace("from rlvr.rollout import native\n", f"import native_{rev} as native\n")
        (folder / (name if name.endswith(".c") else f"{name}_{rev}.py")).write_text(src)  # native.c beside native_REV
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(f"decode_{rev}", folder / f"decode_{rev}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.decode


def main() -> int:
    from bench_rollout import model_setup

    from rlvr.models import load_model
    from rlvr.rollout.decode import decode
    from rlvr.rollout.engine import render_prompt

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", default="9ac273b")
    ap.add_argument("--model", default="smollm2", choices=["tiny", "smollm2"])
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg, path, problems = model_setup(args.model, args.threads)
    torch.set_num_threads(args.threads)
    model, tok = load_model(path, "float32")
    model.eval()
    prompts = [render_prompt(tok, p) for p in problems]
    g = 4
    batch = [prompts[i % len(prompts)] for i in range(args.rows // g)]
    kw = dict(
        max_new_tokens=args.max_new_tokens,
        temperature=cfg.rollout.temperature,
        top_p=1.0,
        greedy=False,
        eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id,
    )
    loops = {args.rev: decode_at(args.rev), "now": decode}
    for fn in loops.values():
        fn(model, batch[:1], 2, **{**kw, "max_new_tokens": 4})  # warm-up
    for rep in range(args.reps):
        tok_s = {}
        for label, fn in loops.items():
            torch.manual_seed(rep)
            t0 = time.perf_counter()
            out = fn(model, batch, g, **kw)
            tok_s[label] = sum(len(o[0]) for o in out) / (time.perf_counter() - t0)
        print(
            f"rep {rep}: "
            + ", ".join(f"{k} {v:.1f} tok/s" for k, v in tok_s.items())
            + f"; now / {args.rev} = {tok_s['now'] / tok_s[args.rev]:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
