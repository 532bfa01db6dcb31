"""Host side of the fork server (`_server.py`): one long-lived root process that forks
each sandbox, so an execution does not pay for `unshare` and an interpreter start-up.

    server = ForkServer(python)
    pidfd = server.spawn([stdin_r, stdout_w, stderr_w])   # pidfd of the sandbox's pid 1
    out, err, finished = exchange(stdin_w, stdout_r, stderr_r, request, deadline)
    if not finished: signal.pidfd_send_signal(pidfd, signal.SIGKILL)

Thread-safe: a lock serialises the (millisecond) spawn round trip; the sandboxes
themselves run concurrently. A server that died is restarted once per call.
"""

from __future__ import annotations

import array
import os
import selectors
import socket
import subprocess
import threading
import time
from pathlib import Path

SERVER = Path(__file__).with_name("_server.py")


class ForkServer:
    def __init__(self, python: str, env: dict[str, str]) -> None:
        self.python, self.env = python, env
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen(
            [self.python, "-I", "-S", "-B", str(SERVER), str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd="/",
            start_new_session=True,
        )
        theirs.close()
        ours.settimeout(30.0)  # a spawn takes milliseconds; past this the server is stuck
        self._sock = ours

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()  # the server exits when its socket closes
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def spawn(self, fds: list[int]) -> int:
        """Start a sandbox on these stdin/stdout/stderr descriptors; return a pidfd of its pid 1."""
        with self._lock:
            error = "fork server unavailable"
            for _ in range(2):
                if self._proc is None or self._proc.poll() is not None:
                    self._stop()
                    self._start()
                assert self._sock is not None
                try:
                    self._sock.sendmsg([b"run"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                    msg, ancdata, _, _ = self._sock.recvmsg(256, socket.CMSG_SPACE(4))
                except OSError as exc:  # died or stuck: start a fresh one and try once more
                    error = f"fork server failed: {exc}"
                    self._proc.kill()
                    self._stop()
                    continue
                received = array.array("i")
                for level, kind, data in ancdata:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        received.frombytes(data[: len(data) - len(data) % received.itemsize])
                if msg == b"ok" and len(received) == 1:
                    os.set_inheritable(received[0], False)
                    return received[0]
                for fd in received:
                    os.close(fd)
                raise OSError(msg.decode("utf-8", "replace") or "fork server closed the connection")
            raise OSError(error)

    def close(self) -> None:
        with self._lock:
            self._stop()


def exchange(stdin_w: int, stdout_r: int, stderr_r: int, data: bytes, deadline: float) -> tuple[bytes, bytes, bool]:
    """Write `data` to the sandbox, read its stdout and stderr to EOF. Closes the three
    descriptors. Returns (stdout, stderr, finished); finished is False at the deadline."""
    out: dict[int, list[bytes]] = {stdout_r: [], stderr_r: []}
    view = memoryview(data)
    with selectors.DefaultSelector() as sel:
        for fd in (stdin_w, stdout_r, stderr_r):
            os.set_blocking(fd, False)
        sel.register(stdin_w, selectors.EVENT_WRITE)
        sel.register(stdout_r, selectors.EVENT_READ)
        sel.register(stderr_r, selectors.EVENT_READ)
        open_fds = {stdin_w, stdout_r, stderr_r}
        try:
            while stdout_r in open_fds or stderr_r in open_fds:
                left = deadline - time.monotonic()
                if left <= 0:
                    return b"".join(out[stdout_r]), b"".join(out[stderr_r]), False
                for key, _ in sel.select(left):
                    fd = key.fd
                    if fd == stdin_w:
                        try:
                            view = view[os.write(fd, view[:65536]) :]
                        except BrokenPipeError:
                            view = view[:0]
                        if not view:
                            sel.unregister(fd)
                            os.close(fd)
                            open_fds.discard(fd)
                        continue
                    chunk = os.read(fd, 65536)
                    if chunk:
                        out[fd].append(chunk)
                    else:
                        sel.unregister(fd)
                        os.close(fd)
                        open_fds.discard(fd)
        finally:
            for fd in open_fds:
                os.close(fd)
    return b"".join(out[stdout_r]), b"".join(out[stderr_r]), True
