"""Directories a worker loads (start weights, reward models), shipped through Ray's object store.

No shared filesystem is assumed: the trainer, which owns the run directory and the cold start,
puts a directory's files in the object store once (`ship`); a worker on any node writes them to
a local cache keyed by their digest (`materialize`) and loads from there. Nothing a worker loads
is read by the driver's or the trainer's path.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray


@dataclass(frozen=True)
class Shipped:
    """A directory's files in the object store."""
    key: str
    """Digest of the files' names, sizes and modification times: a new cold start is a new key."""
    source: str
    """Where the directory was on the trainer's node (for messages only; never read by a worker)."""
    names: tuple[str, ...] = ()
    refs: list[Any] = field(default_factory=list)
    """One object ref per file, inside a list so Ray does not fetch them with the call."""


def ship(path: str | Path) -> Shipped:
    """Put every file under `path` in the object store."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    if not files:
        raise FileNotFoundError(f"{root}: no files to ship to the workers")
    digest = hashlib.sha256()
    for f in files:
        st = f.stat()
        digest.update(f"{f.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    names = tuple(str(f.relative_to(root)) for f in files)
    return Shipped(digest.hexdigest()[:16], str(root), names, [ray.put(f.read_bytes()) for f in files])


def materialize(shipped: Shipped, cache: str | Path | None = None) -> Path:
    """The shipped directory on this node (written once per key; a half-written copy is redone). Actors
    on one node may write the same key at once: each writes its own temporary file and renames it
    into place (a rename replaces atomically; a shared temporary name was renamed away under another)."""
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
