"""A process that runs user code for the trainer, and can be abandoned or killed.

Each call runs in a daemon thread of the worker, so calls overlap (an environment waiting on
I/O does not hold the others) and a call that never returns holds nothing but its thread. The
worker is a fresh interpreter (not a fork of the trainer with its threads and tensors, and
without re-running the trainer's main script as multiprocessing's spawn would), in a session of
its own (`kill` reaches what user code started); it exits when its socket to the trainer closes.
Starting one costs ~0.1 s, plus the user module's import on its first call.

The trainer's side never blocks on a worker: requests go out through a sender thread and
replies come back through a reader thread that completes futures; a worker that exits, crashes
or is killed fails its pending calls with CallFailed('died' | 'killed').
"""

from __future__ import annotations

import atexit
import io
import itertools
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
import weakref
from concurrent.futures import Future
from typing import Any, Callable

import cloudpickle
from multiprocessing.connection import Connection

from rlvr.harness.text import safe_text

OUTER_PYTHONPATH = "RLVR_OUTER_PYTHONPATH"
"""The trainer's own PYTHONPATH, kept for what a worker starts: `outer_environ()`."""
ERROR_CHARS = 2000
"""An exception's text from user code is cut to this many characters."""


def outer_environ(**extra: str) -> dict[str, str]:
    """This process's environment for a program it starts, with the trainer's PYTHONPATH rather than the
    trainer's import path that a worker is given (another interpreter must not import the trainer's packages)."""
    env = {**os.environ, **extra}
    outer = env.pop(OUTER_PYTHONPATH, None)
    if outer is not None:
        env["PYTHONPATH"] = outer
        if not outer:
            del env["PYTHONPATH"]
    return env


class CallFailed(Exception):
    """A call into a worker did not return a value. kind: 'raised' (an exception), 'exit'
    (SystemExit), 'bad_result' (a value that is not plain data), 'unpicklable' (the call could not
    be sent), 'died' (the worker exited or crashed), 'killed' (the trainer killed it)."""

    def __init__(self, kind: str, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}" if type_name else message)
        self.kind, self.type_name, self.message = kind, type_name, message


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _plain_loads(data: bytes) -> Any:
    return _PlainUnpickler(io.BytesIO(data)).load()


_LIVE: weakref.WeakSet = weakref.WeakSet()


class Worker:
    """One worker process (see the module docstring)."""

    def __init__(self, name: str = "worker") -> None:
        self.name = name
        ours, theirs = socket.socketpair()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),  # what the trainer imports
            OUTER_PYTHONPATH: os.environ.get(OUTER_PYTHONPATH, os.environ.get("PYTHONPATH", "")),
        }
        self._proc = subprocess.Popen(
            [sys.executable, "-c", f"from rlvr.harness.worker import _serve; _serve({theirs.fileno()})"],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self._conn = Connection(ours.detach())
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._killed = False
        self.dead = False
        self._sender = threading.Thread(target=self._send_loop, name=f"rlvr-{name}-send", daemon=True)
        self._sender.start()
        threading.Thread(target=self._read_loop, name=f"rlvr-{name}-read", daemon=True).start()
        _LIVE.add(self)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def busy(self) -> int:
        return len(self._pending)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """fn(*args) in the worker; the future's value, or CallFailed. Never raises."""
        future: Future = Future()
        try:
            blob = cloudpickle.dumps((fn, args))
        except Exception as exc:  # noqa: BLE001 - what cannot travel is the caller's error, as a value
            future.set_exception(CallFailed("unpicklable", type(exc).__name__, safe_text(exc, ERROR_CHARS)))
            return future
        with self._lock:
            if self.dead:
                future.set_exception(self._gone())
                return future
            call_id = next(self._ids)
            self._pending[call_id] = future
        self._outbox.put(pickle.dumps((call_id, blob)))
        return future

    def kill(self) -> None:
        """SIGKILL to the worker and everything in its process group; its pending calls fail ('killed')."""
        self._killed = True
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except OSError:
                self._proc.kill()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self._shutdown()
        self._outbox.put(None)
        self._fail_pending()

    def _shutdown(self) -> None:
        """Wake the reader with end of file (whatever holds the other end): only the reader closes the socket,
        so no thread ever reads or closes a descriptor number another socket has been given since."""
        try:
            sock = socket.socket(fileno=self._conn.fileno())
        except OSError:  # closed already
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.detach()

    def _gone(self) -> CallFailed:
        if self._killed:
            return CallFailed("killed", "", f"the {self.name} worker was killed")
        code = self._proc.poll()
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        return CallFailed("died", "", f"the {self.name} worker process {how}")

    def _fail_pending(self) -> None:
        with self._lock:
            self.dead = True
            pending, self._pending = self._pending, {}
        if pending and self._proc.poll() is None:
            try:
                self._proc.wait(1)
            except subprocess.TimeoutExpired:
                pass
        for future in pending.values():
            future.set_exception(self._gone())

    def _send_loop(self) -> None:
        while (data := self._outbox.get()) is not None:
            try:
                self._conn.send_bytes(data)
            except (OSError, ValueError):
                break

    def _read_loop(self) -> None:
        try:
            while True:
                try:
                    data = self._conn.recv_bytes()
                except (EOFError, OSError):
                    break
                self._deliver(data)
        except Exception:  # noqa: BLE001 - a reply that cannot be read: the worker is not to be trusted further
            pass
        finally:  # the worker is gone, or of no use: end it and its sender, reap it, close the socket
            try:
                self._proc.wait(1)
            except subprocess.TimeoutExpired:
                pass
            self._fail_pending()  # 'died' (with its exit code), unless kill() came first
            self.kill()
            self._sender.join(5)  # its last send has failed or finished: the descriptor is no one's now
            self._conn.close()

    def _deliver(self, data: bytes) -> None:
        call_id, ok, payload = _plain_loads(data)  # our own envelope: plain by construction
        with self._lock:
            future = self._pending.pop(call_id, None)
        if future is None or future.done():
            return
        if not ok:
            kind, type_name, message = payload
            future.set_exception(CallFailed(str(kind), str(type_name), str(message)))
            return
        try:
            future.set_result(_plain_loads(payload))
        except Exception as exc:  # noqa: BLE001
            future.set_exception(CallFailed("bad_result", "", f"returned something that is not plain data ({exc})"))


@atexit.register
def _kill_all() -> None:
    for worker in list(_LIVE):
        if not worker.dead:
            worker.kill()


# --- the worker's side ------------------------------------------------------------------------


def _serve(fd: int) -> None:
    os.set_inheritable(fd, False)  # what user code starts does not hold the trainer's socket
    conn = Connection(fd)
    lock = threading.Lock()

    def run(call_id: int, blob: bytes) -> None:
        try:
            fn, args = cloudpickle.loads(blob)
            reply = (call_id, True, pickle.dumps(fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: user code exiting ends its call only
            kind = "exit" if isinstance(exc, SystemExit) else "raised"
            reply = (call_id, False, (kind, type(exc).__name__, safe_text(exc, ERROR_CHARS)))
        try:
            data = pickle.dumps(reply)
        except BaseException as exc:  # noqa: BLE001
            data = pickle.dumps((call_id, False, ("bad_result", type(exc).__name__, safe_text(exc, ERROR_CHARS))))
        with lock:
            conn.send_bytes(data)

    while True:
        try:
            call_id, blob = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            os._exit(0)  # the trainer is gone: so is every call still running
        threading.Thread(target=run, args=(call_id, blob), daemon=True).start()
