"""Does the default run compute the same numbers on an AMD and an Intel CPU, and what does the pin cost?

    .venv/bin/python bench/bench_arithmetic.py [--steps 100] [--rounds 2] [--json bench/arithmetic_results.json]

Four arithmetics, each a fresh `rlvr sft sft.steps=STEPS` (the default run's cold start, shortened)
in its own interpreter: MKL pinned (`rlvr.kernels`: MKL_CBWR=COMPATIBLE) or left to pick
(MKL_CBWR=AUTO, MKL's own default), each on this CPU as it is and with MKL dispatching as on an Intel
host (bench/mkl_as_intel.py). The sha1 of each checkpoint says whether the pinned runs agree where
the unpinned ones do not; the seconds, run in rounds that alternate the arithmetics, say what the pin
costs end to end. Then the fp32 GEMM rate at SmolLM2-135M's shapes (1,024 tokens) under each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from mkl_as_intel import intel_env, isa  # noqa: E402

GEMM = """
import time, torch
from rlvr.kernels import start_as_rlvr
shapes = [(1024, 576, 576), (1024, 576, 1536), (1024, 1536, 576), (1024, 576, 49152)]
mats = [(torch.randn(m, k), torch.randn(k, n)) for m, k, n in shapes]
for a, b in mats:
    a @ b
flops, t0 = 0, time.perf_counter()
for _ in range(5):
    for a, b in mats:
        a @ b
        flops += 2 * a.shape[0] * a.shape[1] * b.shape[1]
print(flops / (time.perf_counter() - t0) / 1e9)
"""


def arithmetics(shim: dict[str, str]) -> dict[str, dict[str, str]]:
    return {
        "pinned": {},
        "pinned, MKL as on Intel": shim,
        "unpinned": {"MKL_CBWR": "AUTO"},
        "unpinned, MKL as on Intel": {**shim, "MKL_CBWR": "AUTO"},
    }


def cold_start(env: dict[str, str], steps: int, out: Path) -> tuple[str, float]:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "sft", f"sft.steps={steps}", "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - t0
    return hashlib.sha1((out / "model.safetensors").read_bytes()).hexdigest()[:12], wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    modes = arithmetics(intel_env())
    rows = {name: {"mkl": isa(env), "sha1": set(), "seconds": [], "gflops": []} for name, env in modes.items()}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for i, (name, env) in enumerate(modes.items()):
                sha, wall = cold_start(env, args.steps, Path(tmp) / f"{r}-{i}")
                rows[name]["sha1"].add(sha)
                rows[name]["seconds"].append(round(wall, 1))
                gflops = subprocess.run(
                    [sys.executable, "-c", GEMM], env={**os.environ, **env}, check=True, capture_output=True, text=True
                ).stdout
                rows[name]["gflops"].append(round(float(gflops), 1))
                print(f"round {r}: {name}: {sha} {wall:.1f} s, GEMM {float(gflops):.1f} GFLOP/s", flush=True)
    for row in rows.values():
        row["sha1"] = sorted(row["sha1"])
    same = rows["pinned"]["sha1"] == rows["pinned, MKL as on Intel"]["sha1"]
    differ = rows["unpinned"]["sha1"] != rows["unpinned, MKL as on Intel"]["sha1"]
    cost = statistics.median(rows["pinned"]["seconds"]) / statistics.median(rows["unpinned"]["seconds"])
    gemm = statistics.median(rows["pinned"]["gflops"]) / statistics.median(rows["unpinned"]["gflops"])
    print(f"pinned: the same weights on both: {same}; unpinned: they differ: {differ}")
    print(f"pinned / unpinned on this CPU: {cost:.2f}x the cold start's seconds, {gemm:.2f}x the GEMM rate")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "steps": args.steps,
                    "rows": rows,
                    "pinned_same": same,
                    "unpinned_differ": differ,
                    "seconds_ratio": round(cost, 3),
                    "gemm_ratio": round(gemm, 3),
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
