"""Fork server: starts sandboxes without paying for an interpreter start-up each time.

Started once per `Sandbox` (as root, with an empty environment) as
`python -I -S -B _server.py FD`, where FD is a SOCK_SEQPACKET socket to the host.
For every message, whose SCM_RIGHTS carry the new sandbox's stdin, stdout and
stderr pipes, it forks; the child unshares a pid namespace and forks again, so
the grandchild is pid 1 of it; that one unshares mount, network, ipc and uts
namespaces and runs `_harness.main()` exactly as the `unshare` launcher would.
The server answers with a pidfd of that pid 1: the host kills through it (no
pid-reuse race), and killing it ends the whole namespace.

Single-threaded, so forking is safe. It is the subreaper of the sandboxes (their
intermediate parent exits at once) and reaps them. It exits when the host closes
its end of the socket.
"""

import array
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I left the script's folder out
import _harness  # noqa: E402

del sys.path[0]

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWNET, CLONE_NEWPID = 0x40000000, 0x20000000
PR_SET_CHILD_SUBREAPER = 36
libc = _harness.libc


def become_sandbox(fds):
    """In the grandchild (pid 1 of a fresh pid namespace); never returns."""
    try:
        for fd, target in zip(fds, (0, 1, 2)):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)  # the server's socket and every other descriptor
        _harness._check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
        _harness.main()  # ends with os._exit(0)
    except BaseException as exc:
        try:
            os.write(2, f"sandbox start failed: {type(exc).__name__}: {exc}\n".encode())
        except OSError:
            pass
    os._exit(1)


def start_sandbox(fds):
    """Fork the sandbox; return its pid as seen from here."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(r)
            _harness._check(libc.unshare(CLONE_NEWPID), "unshare(pid)")  # applies to the next child
            pid = os.fork()
            if pid == 0:
                os.close(w)
                become_sandbox(fds)
            os.write(w, str(pid).encode())
        except BaseException as exc:
            os.write(w, f"error {exc}".encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        answer = f.read().decode()
    os.waitpid(middle, 0)
    if not answer.isdigit():
        raise OSError(answer or "the intermediate process died")
    return int(answer)


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(sock):
    _harness._check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(subreaper)")
    sock.settimeout(1.0)  # wake up now and then to reap finished sandboxes
    while True:
        reap()
        try:
            msg, ancdata, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(3 * 4))
        except socket.timeout:
            continue
        except OSError:
            return
        if not msg:
            return  # the host went away
        fds = array.array("i")
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        try:
            if len(fds) != 3:
                raise OSError(f"expected 3 descriptors, got {len(fds)}")
            pidfd = os.pidfd_open(start_sandbox(list(fds)))
        except OSError as exc:
            sock.sendmsg([f"error {exc}".encode()])
            continue
        finally:
            for fd in fds:
                os.close(fd)
        sock.sendmsg([b"ok"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pidfd]))])
        os.close(pidfd)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
