"""Paths given by URL (scheme://...: any fsspec filesystem) and their local copies (rlvr.storage keeps
a run directory at one)."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
from collections.abc import Sequence
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


def join(location: str | Path, *parts: str) -> str | Path:
    """`location`/parts: a URL stays a string, a local path a Path."""
    if is_url(location):
        return "/".join([str(location).rstrip("/"), *parts])
    return Path(location).joinpath(*parts)


def read_text(location: str | Path) -> str | None:
    """A file's text, by local path or URL; None when there is no such file."""
    if not is_url(location):
        path = Path(location)
        return path.read_text(encoding="utf-8") if path.is_file() else None
    fs, path = filesystem(str(location))
    fs.invalidate_cache(path)  # listings are cached per process; another may have written it since
    return fs.cat_file(path).decode("utf-8") if fs.isfile(path) else None


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
        raise ConfigError(
            f"{url}: its filesystem needs a package that is not installed ({exc}); for s3:// "
            "pip install 'rlvr[storage]'"
        ) from None


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


def pull_longer(fs, remote: str, local: Path) -> None:
    """Download `remote` over `local` when it is longer (a file that only grows: a log, a recording)."""
    if fs.exists(remote) and (not local.exists() or local.stat().st_size < fs.size(remote)):
        local.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(remote, str(local))


class Mirror:
    """Files of a local directory kept at a URL, for files that only grow while a process serves (a
    recording; one writer at a time): `pull` takes each remote copy longer than the local one; after
    `changed` a background thread uploads every file as far as it was written, at most once every
    `interval_s` (an object store cannot append: each upload is the whole file); `close` uploads once
    more. An upload that fails is logged and retried with the next change; the local copy keeps
    everything meanwhile."""

    def __init__(
        self,
        local: str | Path,
        url: str,
        names: Sequence[str],
        lock: threading.Lock | None = None,
        interval_s: float = 2.0,
    ) -> None:
        """lock: held by the writer of the files while it writes a line (their sizes are read under it,
        so an upload never ends inside a line)."""
        self.local, self.url, self.names = Path(local), url.rstrip("/"), tuple(names)
        self.fs, self.path = filesystem(self.url)
        self.lock = lock or threading.Lock()
        self.interval_s = interval_s
        self._changed = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mirror {self.url}", daemon=True)
        self._thread.start()

    def _remote(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"

    def pull(self) -> None:
        self.local.mkdir(parents=True, exist_ok=True)
        self.fs.invalidate_cache(self.path)
        for name in self.names:
            pull_longer(self.fs, self._remote(name), self.local / name)

    def changed(self) -> None:
        self._changed.set()

    def push(self) -> None:
        with self.lock:  # whole lines only
            sizes = {n: (self.local / n).stat().st_size for n in self.names if (self.local / n).exists()}
        for name, size in sizes.items():
            with (self.local / name).open("rb") as f:
                self.fs.pipe_file(self._remote(name), f.read(size))

    def _try_push(self) -> None:
        try:
            self.push()
        except Exception as exc:  # the network, credentials: the next change tries again
            logging.getLogger(__name__).warning("could not upload to %s: %s: %s", self.url, type(exc).__name__, exc)

    def _run(self) -> None:
        while not self._closing.is_set():
            self._changed.wait()
            self._changed.clear()
            if self._closing.is_set():
                return
            self._try_push()
            self._closing.wait(self.interval_s)  # changes meanwhile go up together

    def close(self, timeout_s: float = 60.0) -> None:
        self._closing.set()
        self._changed.set()
        self._thread.join(timeout_s)
        self._try_push()
