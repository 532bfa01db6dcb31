"""Directories a worker loads (start weights, reward models), shipped through Ray's object store.

No shared filesystem is assumed: the driver or the trainer puts a directory's files in the object
store once (`ship`); an actor on another node writes them to a local cache keyed by their digest
(`materialize`) and loads from there. Only an actor that sees the very directory (same node, or a
shared filesystem: same names, sizes and modification times) loads it in place.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from rlvr.urls import digest_dir


@dataclass(frozen=True)
class Shipped:
    """A directory's files in the object store."""

    key: str
    """Digest of the files' names, sizes and modification times: a new cold start is a new key."""
    source: str
    """Where the directory was on the shipper's node: a worker that sees it there, unchanged, loads it
    in place; anyone else gets the copy."""
    names: tuple[str, ...] = ()
    refs: list[Any] = field(default_factory=list)
    """One object ref per file, inside a list so Ray does not fetch them with the call."""


@dataclass(frozen=True)
class RunFiles:
    """Every directory the pools and the trainer ranks load, shipped once by the driver: no node
    needs a path of the driver's (rlvr.deploy.ray.driver.ship_run_files)."""

    start: Shipped
    """The policy RL starts from (the cold start, cached)."""
    learned: dict[str, Shipped] = field(default_factory=dict)
    """Reward-model and local judge directories, by component name."""
    teacher: Shipped | None = None
    """The distillation teacher's directory (algo.distill.teacher)."""


def ship(path: str | Path) -> Shipped:
    """Put every file under `path` in the object store."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    if not files:
        raise FileNotFoundError(f"{root}: no files to ship to the workers")
    names = tuple(str(f.relative_to(root)) for f in files)
    return Shipped(digest_dir(root), str(root), names, [ray.put(f.read_bytes()) for f in files])


def materialize(shipped: Shipped, cache: str | Path | None = None) -> Path:
    """The shipped directory on this node: the original where this node sees it unchanged (the
    shipper's node, or a shared filesystem), else a copy written once per key (a half-written copy
    is redone). Actors on one node may write the same key at once: each writes its own temporary
    file and renames it into place (a rename replaces atomically; a shared temporary name was
    renamed away under another)."""
    source = Path(shipped.source)
    if source.is_dir() and digest_dir(source) == shipped.key:
        return source
    root = Path(cache or os.environ.get("RLVR_SHIP_CACHE") or Path(tempfile.gettempdir()) / "rlvr-shipped")
    target = root / shipped.key
    done = target / ".complete"
    if done.exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    for name, data in zip(shipped.names, ray.get(list(shipped.refs))):
        out = target / name
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name + ".", suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, out)
    done.touch()
    return target
