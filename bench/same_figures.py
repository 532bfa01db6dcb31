"""Does a change keep the figures? Four short runs of an earlier commit and of the working tree,
compared metric by metric and weight file by weight file.

    .venv/bin/python bench/same_figures.py --rev 5c63c9e

Checks out `--rev` into a temporary git worktree and runs, with each tree's `src` first on
PYTHONPATH and this checkout's interpreter: the embedded run (beta 0.04, so the reference is used),
the tool task (configs/tool_arithmetic.yaml), FSDP over 2 gloo ranks and a Ray run (beta 0.04),
each on the tiny model of tests/ops_tiny.py for 2-3 steps. Then every row of each run's
metrics.jsonl is compared (all keys but timings) and the sha1 of every weight file the run wrote
(checkpoints and export). A refactor with no behaviour change gives 0 differing values and
identical weights in all four (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from ops_tiny import OPS_TINY  # noqa: E402  (the tests' tiny run: the same figures as the suite's)

TINY = [*OPS_TINY, "log.report=false"]
RUNS = {
    "embedded": [*TINY, "train.steps=3", "algo.beta=0.04"],
    "tool": [
        "--config",
        "configs/tool_arithmetic.yaml",
        "model.tiny_hidden=32",
        "model.tiny_layers=2",
        "model.tiny_heads=2",
        "sft.steps=80",
        "rollout.batch_size=4",
        "rollout.group_size=4",
        "eval.n=8",
        "eval.every=0",
        "train.threads=1",
        "run.progress=false",
        "log.tensorboard=false",
        "log.report=false",
        "train.steps=2",
    ],
    "fsdp": [*TINY, "train.steps=3", "train.strategy=fsdp", "train.world_size=2"],
    "ray": [*TINY, "train.steps=3", "deploy.backend=ray", "algo.beta=0.04"],
}
TIMING = ("time/", "perf/", "sync/seconds")


def run_all(src: Path, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(src)}
    for name, args in RUNS.items():
        cmd = [
            sys.executable,
            "-m",
            "rlvr.cli",
            "train",
            *args,
            f"run.dir={out / name}",
            f"sft.cache_dir={out / ('sft_' + name)}",
        ]
        with open(out / f"{name}.log", "w") as log:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        print(f"{src.parent.name}: {name} exit {rc}", flush=True)


def rows(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        out.append(
            {k: v for k, v in row.items() if not k.startswith(TIMING) and "seconds" not in k and not k.endswith("_s")}
        )
    return out


def weights(run_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run_dir)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*.safetensors"))
    }


def compare(a: Path, b: Path) -> bool:
    same = True
    for name in RUNS:
        ra, rb = rows(a / name), rows(b / name)
        diffs = [
            (i, k, x.get(k), y.get(k))
            for i, (x, y) in enumerate(zip(ra, rb))
            for k in sorted(set(x) | set(y))
            if x.get(k) != y.get(k)
        ]
        wa, wb = weights(a / name), weights(b / name)
        ok = not diffs and len(ra) == len(rb) and wa == wb and bool(wa)
        same &= ok
        print(
            f"{name}: {len(ra)} vs {len(rb)} metric rows, {len(diffs)} differing values {diffs[:3]}, "
            f"{len(wa)} weight files {'identical' if wa == wb else 'DIFFERENT'} -> {'same' if ok else 'CHANGED'}"
        )
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", required=True, help="the commit to compare the working tree with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlvr-same-") as tmp:
        tmp = Path(tmp)
        base = tmp / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.rev], cwd=ROOT, check=True, capture_output=True
        )
        try:
            for tree, src in (("base", base / "src"), ("head", ROOT / "src")):
                (tmp / f"out-{tree}").mkdir()
                run_all(src, tmp / f"out-{tree}")
            same = compare(tmp / "out-base", tmp / "out-head")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)
    print("same figures" if same else "the figures CHANGED")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
