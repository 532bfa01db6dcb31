"""Shared by the operations tests: a tiny run that learns (varied rewards, so updates move weights)."""

from __future__ import annotations

import json
from pathlib import Path

# 1-digit sums after a short cold start (seconds): it stops and writes the format, rarely the right
# answer, so groups disagree and updates really move the weights.
OPS_TINY = [
    "task.min_digits=1",
    "task.max_digits=1",
    "model.tiny_hidden=32",
    "model.tiny_layers=2",
    "model.tiny_heads=2",
    "sft.steps=80",
    "sft.batch_size=16",
    "sft.examples=1000",
    "sft.lr=1e-2",
    "sft.warmup=20",
    "sft.teacher_error=0.0",
    "rollout.batch_size=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=32",
    "eval.n=8",
    "eval.every=0",
    "train.threads=1",
    "run.progress=false",
    "log.tensorboard=false",
    # every group trains and at the temperature set: the tests time and check one step's batch as sampled
    "algo.filter_zero_std=false",
    "rollout.auto_temperature.when=never",
]


def sft_cache(tmp_path_factory) -> Path:
    """One cold-start cache for all the ops test files in a session (SFT is keyed by its config)."""
    return tmp_path_factory.getbasetemp() / "ops-sft-cache"


def metric_rows(run_dir: Path) -> list[dict]:
    """metrics.jsonl without wall-clock keys (time/, perf/, sync/seconds): what must match between two runs."""
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "sync/seconds"))} for r in rows]


def events(run_dir: Path, kind: str | None = None) -> list[dict]:
    rows = [json.loads(line) for line in (Path(run_dir) / "events.jsonl").read_text().splitlines()]
    return [e for e in rows if kind is None or e["kind"] == kind]


def logged_step(run_dir: Path, step: int) -> bool:
    """Whether metrics.jsonl has a training row of `step` or later (a line being written is skipped)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return False
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # the line being written
            continue
        if row.get("step", 0) >= step and "reward/mean" in row:
            return True
    return False
