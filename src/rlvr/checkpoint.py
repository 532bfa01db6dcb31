"""Checkpoints that either verify completely or do not count.

A checkpoint is written into `step_NNNNNN.tmp/`, every file fsynced, a
manifest with the sha256 of every file written last, and the directory
renamed into place. `latest_valid` walks checkpoints newest first and
skips (and reports) any whose manifest is missing or does not verify.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

MANIFEST = "manifest.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_tree(path: Path) -> None:
    for p in sorted(path.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


@dataclass
class Checkpoint:
    path: Path
    step: int

    @property
    def model_dir(self) -> Path:
        return self.path / "model"

    def trainer_state(self) -> dict[str, Any]:
        return torch.load(self.path / "trainer_state.pt", weights_only=False)


def save_checkpoint(root: Path, step: int, model, tokenizer, trainer_state: dict[str, Any], *,
                    config_hash: str, keep: int) -> Checkpoint:
    root = Path(root)
    final = root / f"step_{step:06d}"
    tmp = root / f"step_{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    torch.save(trainer_state, tmp / "trainer_state.pt")
    files = {str(p.relative_to(tmp)): _sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    (tmp / MANIFEST).write_text(json.dumps({"step": step, "config_hash": config_hash, "files": files}, indent=1))
    _fsync_tree(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _retain(root, keep)
    return Checkpoint(final, step)


def verify(path: Path) -> str | None:
    """None when the checkpoint at `path` is complete and intact, else what is wrong."""
    manifest = path / MANIFEST
    if not manifest.exists():
        return "no manifest (incomplete write)"
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError) as exc:
        return f"unreadable manifest: {exc}"
    for name, digest in files.items():
        p = path / name
        if not p.exists():
            return f"missing file {name}"
        if _sha256(p) != digest:
            return f"checksum mismatch in {name}"
    return None


def list_checkpoints(root: Path) -> list[Path]:
    root = Path(root)
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_") and not p.name.endswith(".tmp"))


def latest_valid(root: Path, on_skip=None) -> Checkpoint | None:
    for path in reversed(list_checkpoints(root)):
        problem = verify(path)
        if problem is None:
            return Checkpoint(path, int(path.name.split("_")[1]))
        if on_skip:
            on_skip(path, problem)
    return None


def _retain(root: Path, keep: int) -> None:
    if keep <= 0:
        return
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
