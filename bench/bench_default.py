"""The default run on several seeds, one after the other: held-out accuracy before and after, the
gain and the wall time of each (cold start included when it is not cached yet).

    .venv/bin/python bench/bench_default.py [--seeds 0 1 2 3 4] [--mkl-as-intel] [--json FILE] [key=value ...]

Each seed is a full `rlvr train seed=S run.name=bench-default-S`, in a fresh interpreter, so a
seed's wall time is what a user waits for it. The bar the default run must clear: a gain of at least 30 points and a
final accuracy of at least 60% on every seed, within 10 minutes each on 2 cores. `--mkl-as-intel`
runs every seed with MKL's kernels as on an Intel host (bench/mkl_as_intel.py: on an AMD CPU with
AVX-512, the arithmetic of an AVX-512 Xeon), and each row names the kernels MKL reported.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from mkl_as_intel import intel_env, isa  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--mkl-as-intel", action="store_true", help="MKL's kernels as on an Intel host")
    ap.add_argument("--json", default=None)
    args, overrides = ap.parse_known_args()
    extra_env = intel_env() if args.mkl_as_intel else {}
    mkl = isa(extra_env)
    print(f"MKL runs: {mkl}", flush=True)
    rows = []
    for seed in args.seeds:
        name = f"bench-default-{seed}{'-intel' if args.mkl_as_intel else ''}"
        t0 = time.time()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "rlvr.cli",
                "train",
                f"seed={seed}",
                f"run.name={name}",
                "run.progress=false",
                *overrides,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, **extra_env},
        )
        wall = time.time() - t0
        summary = json.loads((ROOT / "runs" / name / "summary.json").read_text()) if done.returncode == 0 else {}
        before = summary.get("eval_before", {}).get("accuracy")
        after = (summary.get("eval_after") or {}).get("accuracy")
        row = {
            "seed": seed,
            "status": summary.get("status", f"exit {done.returncode}"),
            "before": before,
            "after": after,
            "gain": None if before is None or after is None else after - before,
            "wall_s": round(wall, 1),
            "mkl": mkl,
        }
        rows.append(row)
        gain = "-" if row["gain"] is None else f"{row['gain']:+.1%}"
        print(
            f"seed {seed}: {before if before is None else f'{before:.1%}'} -> "
            f"{after if after is None else f'{after:.1%}'} ({gain}) in {wall / 60:.1f} min, {row['status']}",
            flush=True,
        )
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
    ok = all(r["gain"] is not None and r["gain"] >= 0.30 and r["after"] >= 0.60 and r["wall_s"] <= 600 for r in rows)
    print(f"all seeds: gain >= +30 points, final >= 60%, <= 10 min: {'yes' if ok else 'no'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
