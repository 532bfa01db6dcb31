"""A persistent pool of verification worker processes with a hard wall-clock limit.

Why not `multiprocessing.Pool` or `concurrent.futures`: neither can kill one
task that hangs (a sympy expansion of 9^{9^{9^9}} never returns and ignores
signals in C code). Here every worker runs one task at a time; a task past its
budget gets its worker killed and replaced, and the task reports a timeout.

Workers are fresh interpreters (`python -c ...` via subprocess, talking pickled
messages over their stdin/stdout): never forked from a parent that may hold
torch threads or CUDA state, and unlike multiprocessing's spawn they never
re-import the parent's `__main__`, so a script without a main guard, a notebook
or a Ray actor can score rewards too. They start lazily on first use, are reused
across calls, and are killed when the pool is closed, garbage collected or the
interpreter exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

_STARTUP_S = 120.0  # importing sympy on a loaded 2-core machine can take a while


@dataclass
class Outcome:
    status: str
    """'ok', 'error' (the function raised) or 'timeout' (killed at the budget)."""
    value: Any = None
    error: str | None = None
    seconds: float = 0.0


def _worker_entry(memory_mb: int) -> None:
    """Runs in the worker interpreter. Our channel is the original stdout; fd 1 then
    points at stderr so a stray print in a library cannot corrupt the channel."""
    out_fd = os.dup(1)
    os.dup2(2, 1)
    _worker_main(Connection(0, writable=False), Connection(out_fd, readable=False), memory_mb)


def _worker_main(conn_in: Connection, conn: Connection, memory_mb: int) -> None:
    if memory_mb > 0:
        try:
            import resource

            limit = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass  # not every platform lets us; the wall-clock limit still holds
    from rlvr.rewards import equivalence  # the slow import, done once per worker

    equivalence.install()
    functions = {"judge_sample": equivalence.judge_sample}
    conn.send(("ready",))
    while True:
        try:
            msg = conn_in.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        name, args = msg
        try:
            conn.send(("ok", functions[name](*args)))
        except BaseException as exc:  # noqa: BLE001 - RecursionError, MemoryError: all are verdicts
            conn.send(("error", f"{type(exc).__name__}: {str(exc)[:300]}"))


class _Worker:
    def __init__(self, memory_mb: int) -> None:
        import rlvr

        env = dict(os.environ)
        src = os.path.dirname(os.path.dirname(os.path.abspath(rlvr.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
        env["PYTHONHASHSEED"] = "0"  # same set iteration order in every worker: same sympy path
        code = f"from rlvr.rewards.pool import _worker_entry; _worker_entry({int(memory_mb)})"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.send_conn = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.conn = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.ready = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.send_conn.close()
        self.conn.close()


def _shutdown(workers: list[_Worker]) -> None:
    for w in workers:
        try:
            if w.alive():
                w.send_conn.send(None)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 2
    for w in workers:
        try:
            w.proc.wait(timeout=max(0.01, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        w.kill()
    workers.clear()


class VerifyPool:
    def __init__(self, workers: int = 2, timeout_s: float = 5.0, memory_mb: int = 2048) -> None:
        self.size = max(1, workers)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()  # one batch at a time: workers are not shared between calls
        self.started = 0
        """Worker processes started so far (replacements included); for tests and logs."""
        # finalize runs on close(), on garbage collection and at interpreter exit
        self._finalizer = weakref.finalize(self, _shutdown, self._workers)
        self._finalizer.atexit = True

    def _spawn(self) -> _Worker:
        w = _Worker(self.memory_mb)
        self._workers.append(w)
        self.started += 1
        return w

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self._workers.remove(w)
        self._spawn()

    def _on_startup_message(self, w: _Worker) -> None:
        try:
            w.ready = w.conn.recv() == ("ready",)
        except (EOFError, OSError):
            raise RuntimeError(
                "a verification worker died while starting (its traceback, if any, is on "
                "stderr; is reward.math.worker_memory_mb too small?)"
            ) from None

    def run(self, name: str, tasks: list[tuple], budgets: list[float] | None = None) -> list[Outcome]:
        """Run `name(*args)` for every args tuple; one Outcome per task, same order.
        A task's budget (`budgets[i]`, default timeout_s) starts when a ready worker receives
        it, so worker start-up (imports, replacement after a kill) is never charged to a task."""
        # Waking up and killing takes a few ms on a loaded machine; start early enough
        # that the verdict is back within the budget, which is a hard bound.
        kill_after = [b - min(0.1, 0.02 * b) for b in (budgets or [self.timeout_s] * len(tasks))]
        with self._lock:
            return self._run(name, tasks, kill_after)

    def _run(self, name: str, tasks: list[tuple], kill_after: list[float]) -> list[Outcome]:
        results: list[Outcome | None] = [None] * len(tasks)
        pending = deque(range(len(tasks)))
        busy: dict[_Worker, tuple[int, float]] = {}
        startup_deadline = time.monotonic() + _STARTUP_S
        while pending or busy:
            while len(self._workers) < self.size:
                self._spawn()
            for w in list(self._workers):
                if pending and w.ready and w not in busy:
                    i = pending.popleft()
                    try:
                        w.send_conn.send((name, tasks[i]))
                    except OSError:  # died while idle (e.g. killed from outside): retry elsewhere
                        pending.appendleft(i)
                        self._replace(w)
                        continue
                    busy[w] = (i, time.monotonic())
            starting = [w for w in self._workers if not w.ready]
            now = time.monotonic()
            if starting and not busy and now > startup_deadline:
                raise RuntimeError(f"verification workers did not start within {_STARTUP_S:.0f} s")
            deadlines = [start + kill_after[i] for i, start in busy.values()] or [startup_deadline]
            ready = wait([w.conn for w in busy] + [w.conn for w in starting], timeout=max(0.0, min(deadlines) - now))
            now = time.monotonic()
            for w in starting:
                if w.conn in ready:
                    self._on_startup_message(w)
                    startup_deadline = now + _STARTUP_S
            for w in list(busy):
                i, start = busy[w]
                if w.conn in ready:
                    del busy[w]
                    try:
                        status, payload = w.conn.recv()
                    except (EOFError, OSError):  # the worker died (e.g. a C stack overflow)
                        results[i] = Outcome("error", error="verification worker crashed", seconds=now - start)
                        self._replace(w)
                        continue
                    results[i] = (
                        Outcome("ok", payload, seconds=now - start)
                        if status == "ok"
                        else Outcome("error", error=payload, seconds=now - start)
                    )
                elif now - start >= kill_after[i]:
                    del busy[w]
                    results[i] = Outcome(
                        "timeout", error=f"verification exceeded {self.timeout_s:g} s", seconds=now - start
                    )
                    self._replace(w)
        return [r for r in results if r is not None]

    def close(self) -> None:
        self._finalizer()

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    def __enter__(self) -> "VerifyPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
