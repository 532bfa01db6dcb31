"""A run directory at a URL (fsspec: s3://, gs://, file://, ...), the local disk only its cache.

    store = run_store(cfg)                   # rlvr.assembly; None when run.dir is a local path
    store.pull()                             # before the run opens: its logs and newest committed checkpoint
    ...                                      # the run writes into cfg.run_dir, the local cache
    store.push_checkpoint(path)              # after each checkpoint: its files, then its manifest
    store.push()                             # at the end: logs, report, the exported model

A checkpoint at the URL counts once its manifest is there, and the manifest goes up last: an upload
cut short (kill -9, a lost node) leaves a checkpoint without one, which `pull` skips and reports, so
a resume starts from the newest checkpoint that was committed. After download the manifest's sha256
sums verify every file, as for a checkpoint written locally (rlvr.checkpoint). Logs are append-only:
`pull` takes the longer of the local and the remote copy. Credentials and endpoints come from the
filesystem's own settings (for S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, ...).
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from rlvr.checkpoint import MANIFEST, list_checkpoints, retained, verify
from rlvr.urls import filesystem, pull_longer

LOGS = ("config.yaml", "metrics.jsonl", "events.jsonl", "samples.jsonl", "eval.jsonl")
"""The run's files a resume continues (rlvr.runlog), pulled with its checkpoint."""


class RunStore:
    """The run directory `url`, mirrored from the local cache `local`. Rank N > 0 of a trainer group
    keeps its logs under ranks/rank_N (rlvr.assembly.open_run), and mirrors those."""

    def __init__(
        self, url: str, local: Path, *, retention: dict | None = None, kill_at_step: int = 0, rank: int = 0
    ) -> None:
        """retention: Checkpointer's keep, keep_best, best_mode (default: keep every checkpoint)."""
        self.url, self.local = url.rstrip("/"), Path(local)
        self.fs, self.path = filesystem(self.url)
        self.retention = retention or {"keep": 0}
        self.kill_at_step = kill_at_step
        self.rank = rank
        self.logs = "" if rank == 0 else f"ranks/rank_{rank}"
        """This rank's log directory, relative to the run directory."""

    def _remote(self, *parts: str) -> str:
        return "/".join([self.path.rstrip("/"), *(p for p in parts if p)])

    # -- reading ----------------------------------------------------------------------------------

    def committed(self) -> tuple[list[str], list[str]]:
        """(checkpoint names at the URL whose manifest is there, oldest first; names without one)."""
        root = self._remote("checkpoints")
        self.fs.invalidate_cache(root)  # listings are cached per process; another may have written since
        if not self.fs.isdir(root):
            return [], []
        names = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(root, detail=False))
        names = [n for n in names if n.startswith("step_") and not n.endswith(".tmp")]
        done = [n for n in names if self.fs.exists(self._remote("checkpoints", n, MANIFEST))]
        return done, [n for n in names if n not in done]

    def pull(self, checkpoint: bool = True) -> list[str]:
        """Bring this rank's logs and (`checkpoint`) the run's newest committed checkpoint into the
        local cache (what a resume needs); the checkpoints left out because their upload never
        finished, as problems. Ranks sharing a cache pull one after the other."""
        self.local.mkdir(parents=True, exist_ok=True)
        self.fs.invalidate_cache(self.path)
        for name in LOGS:
            pull_longer(self.fs, self._remote(self.logs, name), self.local / self.logs / name)
        if not checkpoint:
            return []
        done, partial = self.committed()
        problems = [
            f"{self.url}/checkpoints/{n}: no manifest (its upload did not finish)"
            for n in partial
            if int(n.split("_")[1]) > max((int(d.split("_")[1]) for d in done), default=-1)
        ]
        newest = done[-1] if done else ""
        for p in list_checkpoints(self.local / "checkpoints"):  # the URL is the run: what it never committed
            if p.name > newest:  # is not resumed from (every rank of a group resumes from the same step)
                problems.append(f"{p}: not committed at {self.url}")
                shutil.rmtree(p)
        local = {p.name for p in list_checkpoints(self.local / "checkpoints") if verify(p) is None}
        if done and done[-1] not in local:
            final = self.local / "checkpoints" / done[-1]
            tmp = final.with_name(final.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            self.fs.get(self._remote("checkpoints", done[-1]) + "/", str(tmp), recursive=True)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        return problems

    # -- writing ----------------------------------------------------------------------------------

    def push_checkpoint(self, path: Path) -> None:
        """Upload a local checkpoint: every file, then its manifest (the commit)."""
        path = Path(path)
        self.upload(
            path,
            [p.relative_to(path).as_posix() for p in sorted(path.rglob("*")) if p.is_file() and p.name != MANIFEST],
        )
        self.commit(path)

    def upload(self, path: Path, names: list[str]) -> None:
        """Upload files of the checkpoint at `path` (a trainer group's ranks each upload their own)."""
        path = Path(path)
        remote = self._remote("checkpoints", path.name.removesuffix(".tmp"))
        for k, name in enumerate(names):
            self.fs.put_file(str(path / name), f"{remote}/{name}")
            if k == 0 and _step(path) == self.kill_at_step:  # debug.kill_during_upload_at_step
                os.kill(os.getpid(), signal.SIGKILL)

    def commit(self, path: Path) -> None:
        """Upload the manifest of a checkpoint whose files are all at the URL, which commits it; then
        the logs, retention at the URL over the checkpoints there (a resumed run's cache may hold
        fewer), and the removal of older uploads that were never committed."""
        path = Path(path)
        self.fs.put_file(str(path / MANIFEST), self._remote("checkpoints", path.name, MANIFEST))
        self.push_logs()
        done, partial = self.committed()
        kept = retained(
            done, lambda n: self.fs.cat(self._remote("checkpoints", n, MANIFEST)).decode(), **self.retention
        )
        for name in [n for n in done if n not in kept] + [n for n in partial if n < path.name]:
            self.fs.rm(self._remote("checkpoints", name), recursive=True)

    def download(self, name: str, names: list[str], into: Path) -> None:
        """Files of the checkpoint `name` at the URL into the local directory `into` (a rank on a
        disk of its own fetches the shards the other ranks wrote)."""
        for rel in names:
            (Path(into) / rel).parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(self._remote("checkpoints", name, rel), str(Path(into) / rel))

    def push_logs(self) -> None:
        """This rank's logs, as they are now (with each checkpoint: a resume continues them)."""
        for name in LOGS:
            if (self.local / self.logs / name).exists():
                self.fs.put_file(str(self.local / self.logs / name), self._remote(self.logs, name))

    def push(self) -> None:
        """Upload everything of the run but its checkpoints (uploaded as they were written); each rank
        N > 0 its own logs."""
        if self.rank:
            self.fs.put(str(self.local / self.logs) + "/", self._remote(self.logs), recursive=True)
            return
        for entry in sorted(self.local.iterdir()):
            if entry.name in ("checkpoints", "ranks"):
                continue
            if entry.is_dir():
                self.fs.put(str(entry) + "/", self._remote(entry.name), recursive=True)
            else:
                self.fs.put_file(str(entry), self._remote(entry.name))


def _step(path: Path) -> int:
    return int(Path(path).name.removesuffix(".tmp").split("_")[1])
