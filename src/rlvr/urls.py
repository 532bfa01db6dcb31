"""Paths given by URL (scheme://...: any fsspec filesystem) and their local copies (rlvr.storage keeps
a run directory at one)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import fsspec

from rlvr.configlib import ConfigError


def is_url(path: str | os.PathLike | None) -> bool:
    """Whether `path` names a location by URL (s3://, gs://, file://, ...) rather than a local path."""
    return isinstance(path, str) and "://" in path


def cache_dir(url: str, root: str | Path) -> Path:
    """The local copy of `url` under `root`: one directory per URL."""
    name = url.rstrip("/").rsplit("/", 1)[-1] or "root"
    return Path(root) / f"{name}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


def digest_dir(root: str | Path) -> str:
    """A key for a directory's files: their names, sizes and modification times (cheap: nothing is
    read; a rewritten file is a new key)."""
    root = Path(root)
    digest = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        st = f.stat()
        digest.update(f"{f.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def filesystem(url: str):
    """(fsspec filesystem, path within it) of `url`; a clear error when its protocol's package is missing."""
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise ConfigError(f"{url}: its filesystem needs a package that is not installed ({exc}); for s3:// "
                          "pip install 'rlvr[storage]'") from None


URL_CACHE = ".cache/urls"
"""Where directories given by URL are downloaded (relative to the working directory)."""


def fetch_dir(url: str, root: str | Path = URL_CACHE) -> Path:
    """A directory at a URL (an exported model, a checkpoint, a cold start) downloaded once into its
    local cache. Processes of one machine may fetch it at once (the ranks of a trainer group): each
    downloads into a directory of its own, the first to finish renames it into place."""
    local = cache_dir(url, root)
    if (local / ".complete").exists():
        return local
    fs, path = filesystem(url)
    if not fs.isdir(path):
        raise FileNotFoundError(f"{url}: no such directory")
    tmp = local.with_name(f"{local.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    fs.get(path.rstrip("/") + "/", str(tmp), recursive=True)
    (tmp / ".complete").touch()
    if (local / ".complete").exists():  # another process was first
        shutil.rmtree(tmp)
        return local
    shutil.rmtree(local, ignore_errors=True)
    os.replace(tmp, local)
    return local


def put_dir(local: str | Path, url: str, *, last: str | None = None) -> None:
    """Upload a local directory to `url`, the file named `last` after every other (the marker a
    reader takes for the whole directory)."""
    fs, path = filesystem(url)
    root = Path(local)
    files = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.name == last)
    for f in files:
        fs.put_file(str(f), f"{path.rstrip('/')}/{f.relative_to(root).as_posix()}")
