"""Trusted supervisor inside the sandbox: one marshalled request on stdin, one JSON reply on stdout.

It runs as pid 1 of fresh pid/net/mount/ipc/uts namespaces, normally as root:
forked by the fork server (`_server.py`, which calls `main()`), or started as
`unshare --net --mount --pid --ipc --uts --fork --kill-child python -I -S -B
_harness.py`. It builds a private root filesystem, then runs
the untrusted program case by case in forked children that drop to an unused
uid under resource limits; after each child it SIGKILLs every other process of
the namespace, so nothing a program starts outlives its case.

Standard library only: after pivot_root the project's packages are not visible.
The untrusted child closes every descriptor but stdin/stdout/stderr and its
result pipe and runs as another uid, so it cannot reach this process's stdout
(not even through /proc/1/fd). Expected values of stdio and function tests never
enter the sandbox; the code in `_child.py` runs in the forked child. An assert test's
check code runs in that forked child (`_checker.py`), the program in a fresh
interpreter it starts (`_program.py`).
"""

# Start-up time is per-execution overhead: `python -I -S` and only modules that
# do not pull in `re`/`enum` (json and signal do); the request arrives marshalled
# from the trusted host, and replies are written by the small encoder below.
import _signal
import ctypes
import marshal
import os
import select
import stat
import sys
import time

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
PIVOT_ROOT_NR = {"x86_64": 155, "aarch64": 41}
PRIVATE = "/.h"  # harness-only tmpfs (mode 0700, root): case stdin/stdout/stderr files
DEVICES = ("null", "zero", "full", "random", "urandom")
WORKDIR = "/sandbox"  # the program's working directory; a name no host path is likely to use
WRITABLE = (WORKDIR, "/tmp", "/dev/shm")  # fresh tmpfs mounts, per spawn
MEMORY_CHECK_MS = 20  # how often the total resident memory of a run is checked
PAGE = os.sysconf("SC_PAGE_SIZE")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I left the script's folder out
from _checker import run_assert  # noqa: E402
from _child import dumps, enter_child, probe_child, run_child  # noqa: E402

del sys.path[0]

SIGNAL_NAMES = {getattr(_signal, n): n for n in dir(_signal) if n.startswith("SIG") and not n.startswith("SIG_")}

libc = ctypes.CDLL(None, use_errno=True)


def _check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _b(s):
    return None if s is None else s.encode()


def mount(src, target, fstype, flags, data=None):
    _check(libc.mount(_b(src), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data)), f"mount {target}")


def umount(target):
    _check(libc.umount2(_b(target), MNT_DETACH), f"umount {target}")


def _kept_flags(path):
    # In a user namespace the flags of an inherited mount are locked; a remount
    # that drops one of them fails, so carry them over.
    f = os.statvfs(path).f_flag
    return (
        (MS_NOEXEC if f & os.ST_NOEXEC else 0)
        | (MS_NOATIME if f & os.ST_NOATIME else 0)
        | (MS_NODIRATIME if f & os.ST_NODIRATIME else 0)
        | (MS_RELATIME if f & os.ST_RELATIME else 0)
    )


def _under(path, roots):
    return any(path == r or path.startswith(r + "/") for r in roots)


def _make_like(target, is_dir):
    """An empty directory or file to mount on."""
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()


def _read_only(target):
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | _kept_flags(target))


def build_root(req):
    """Private root: a small tmpfs holding read-only binds of the allowed host
    paths (system libraries, the interpreter), fresh /proc and /dev, and tmpfs
    mounts for /sandbox, /tmp and /dev/shm. The host root is then detached."""
    new = "/tmp"  # mount point for the new root; hides the host /tmp in this namespace only
    binds, links = [], []
    for path in req["ro_paths"]:
        if os.path.islink(path) and os.path.dirname(path) == "/":
            links.append((path, os.readlink(path)))  # /bin -> usr/bin on merged-/usr systems
        elif os.path.exists(path):
            # Open before the tmpfs goes on top, so sources under /tmp stay reachable.
            binds.append((path, os.open(path, os.O_PATH), False))
    for dev in DEVICES:
        binds.append((f"/dev/{dev}", os.open(f"/dev/{dev}", os.O_PATH), True))
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    req["_rebind"] = []
    for k, (path, fd, is_dev) in enumerate(binds):
        target = new + path
        if _under(path, WRITABLE):
            # e.g. a venv under /tmp: the per-run tmpfs would hide it; keep it aside and
            # bind it again on top of each fresh tmpfs (fresh_dirs).
            target = f"{new}/.ro/{k}"
            req["_rebind"].append((f"/.ro/{k}", path))
        _make_like(target, stat.S_ISDIR(os.fstat(fd).st_mode))
        mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
        os.close(fd)
        if not is_dev:  # device nodes stay writable (/dev/null); everything else read-only
            _read_only(target)
    for path, dest in links:
        os.symlink(dest, new + path)
    for d in ("proc", WORKDIR[1:], "tmp", "dev/shm", PRIVATE[1:]):
        os.makedirs(f"{new}/{d}", exist_ok=True)
    for name, dest in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(dest, f"{new}/dev/{name}")
    mount("proc", f"{new}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(
        "tmpfs",
        new + PRIVATE,
        "tmpfs",
        MS_NOSUID | MS_NODEV | MS_NOEXEC,
        f"size={2 * req['limits']['fsize_bytes'] + (1 << 20)},mode=0700",
    )
    os.chdir(new)
    nr = PIVOT_ROOT_NR.get(os.uname().machine)
    if nr is None:
        raise OSError(f"pivot_root: unknown syscall number for {os.uname().machine}")
    _check(libc.syscall(ctypes.c_long(nr), b".", b"."), "pivot_root")
    umount(".")  # the old root, stacked on top of the new one by pivot_root(".", ".")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def fresh_dirs(req):
    """Fresh, empty /work (owned by the sandbox uid), /tmp and /dev/shm for every spawn."""
    if req["isolate"]:
        size = req["tmpfs_mb"]
        for path, opts in (
            (WORKDIR, f"mode=0700,uid={req['uid'] or 0},gid={req['gid'] or 0}"),
            ("/tmp", "mode=1777"),
            ("/dev/shm", "mode=1777"),
        ):
            if os.path.ismount(path):
                umount(path)
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size}m,nr_inodes=16384,{opts}")
        for stash, path in req["_rebind"]:
            _make_like(path, os.path.isdir(stash))
            mount(stash, path, None, MS_BIND)
            _read_only(path)
    else:  # no mount namespace: a host directory the executor created and will delete
        import shutil

        shutil.rmtree(req["workdir"], ignore_errors=True)
        os.mkdir(req["workdir"], 0o700)
        if req["uid"] is not None:
            os.chown(req["workdir"], req["uid"], req["gid"])
    path = f"{req['workdir']}/solution.py"
    with open(path, "w", encoding="utf-8") as f:
        f.write(req["source"])
    if req["uid"] is not None:
        os.chown(path, req["uid"], req["gid"])


def kill_all(req, pid):
    """SIGKILL the child and everything it started, then reap."""
    if os.getpid() == 1:  # pid namespace: every other process in it is the program's
        try:
            os.kill(-1, _signal.SIGKILL)
        except ProcessLookupError:
            pass
        return
    try:
        os.killpg(pid, _signal.SIGKILL)
    except ProcessLookupError:
        pass
    if req["uid"] is not None:  # no pid namespace: also kill whatever runs as the sandbox uid
        killer = os.fork()
        if killer == 0:
            try:
                os.setresuid(req["uid"], req["uid"], req["uid"])
                os.kill(-1, _signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(killer, 0)


def reap_rest():
    # Zombies still count for kill(-1); loop until nothing is left to signal or reap.
    while os.getpid() == 1:
        try:
            os.kill(-1, _signal.SIGKILL)
            os.waitpid(-1, 0)
        except (ProcessLookupError, ChildProcessError):
            return


def spawn(req, start, stdin_text):
    priv = req["private_dir"]
    with open(f"{priv}/in", "w", encoding="utf-8") as f:
        f.write(stdin_text)
    fds = [os.open(f"{priv}/in", os.O_RDONLY)]
    fds += [os.open(f"{priv}/{n}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for n in ("out", "err")]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            if req["mode"] == "assert":
                run_assert(req, *fds, w)  # this process checks; the program gets a fresh interpreter
            enter_child(req, *fds, w)
            if req["mode"] == "probe":
                os.write(3, f"{req['nonce']} probe {dumps(probe_child(req))}\n".encode())
                os._exit(0)
            run_child(req, start)
        except BaseException as exc:
            try:
                os.write(2, f"harness child: {type(exc).__name__}: {exc}\n".encode())
            except BaseException:
                pass
        os._exit(125)
    for fd in fds + [w]:
        os.close(fd)
    return pid, r


def watch(req, pid, r, on_progress):
    """Wait for the child, reading its result pipe; kill at the case deadline.
    `on_progress(line)` returns True when a case finished (resets the case clock)."""
    now = time.monotonic()
    deadline = min(now + req["case_timeout_s"], req["_total_deadline"])
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(r, select.POLLIN)
    buf, lines, size, why = b"", [], 0, None
    # RLIMIT_AS bounds each process; the sum over all of a run's processes is watched here.
    watch_memory = os.getpid() == 1 and req["total_memory_bytes"] > 0
    while why is None:
        wait_ms = max(0.0, deadline - time.monotonic()) * 1000
        events = poller.poll(min(wait_ms, MEMORY_CHECK_MS) if watch_memory else wait_ms)
        if not events and time.monotonic() >= deadline:
            why = "wall_timeout"
            break
        if watch_memory and resident_bytes() > req["total_memory_bytes"]:
            why = "memory_total"
            break
        for fd, _ in events:
            if fd == pidfd:
                why = "exited"
            elif fd == r:
                chunk = os.read(r, 65536)
                if not chunk:
                    poller.unregister(r)
                    continue
                size += len(chunk)
                if size > req["max_output_bytes"]:
                    why = "output_limit"
                    break
                buf += chunk
                *done, buf = buf.split(b"\n")
                for ln in done:
                    line = ln.decode("utf-8", "replace")
                    lines.append(line)
                    if on_progress(line):
                        deadline = min(time.monotonic() + req["case_timeout_s"], req["_total_deadline"])
    if why == "exited":  # collect what is left in the pipe without waiting on grandchildren
        os.set_blocking(r, False)
        try:
            while size <= req["max_output_bytes"] and (chunk := os.read(r, 65536)):
                size += len(chunk)
                buf += chunk
        except BlockingIOError:
            pass
        lines += [ln.decode("utf-8", "replace") for ln in buf.split(b"\n") if ln]
    kill_all(req, pid)
    _, status, usage = os.wait4(pid, 0)
    reap_rest()
    os.close(pidfd)
    os.close(r)
    return why, status, usage.ru_utime + usage.ru_stime, lines


def resident_bytes():
    """Resident memory of every process in this pid namespace but the harness. Pages shared
    after fork count once per process: an over-estimate, on the safe side."""
    total = 0
    for name in os.listdir("/proc"):
        if name.isdigit() and name != "1":
            try:
                with open(f"/proc/{name}/statm", "rb") as f:
                    total += int(f.read().split()[1]) * PAGE
            except (OSError, IndexError, ValueError):
                pass  # exited meanwhile
    return total


def _size(req, name):
    return os.stat(f"{req['private_dir']}/{name}").st_size


def read_capped(path, cap):
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    return data[:cap].decode("utf-8", "replace"), len(data) > cap


def outcome(req, why, status, cpu_s, lines, elapsed):
    """Status of one spawn: ok | timeout | memory | killed | error, plus a finer reason."""
    code = os.waitstatus_to_exitcode(status)
    sig = -code if code < 0 else None
    exit_code = code if code >= 0 else None
    if why == "wall_timeout":
        st, reason = "timeout", "wall_timeout"
    elif why == "output_limit":
        st, reason = "killed", "output_limit"
    elif why == "memory_total":
        st, reason = "memory", "memory_total"
    elif sig in (_signal.SIGXCPU, _signal.SIGKILL) and cpu_s >= req["limits"]["cpu_s"] - 0.1:
        st, reason = "timeout", "cpu_limit"
    elif sig == _signal.SIGXFSZ or max(_size(req, "out"), _size(req, "err")) >= req["limits"]["fsize_bytes"]:
        st, reason = ("killed" if sig else "error"), "output_limit"
    elif "memory" in lines:
        st, reason = "memory", "memory"
    elif sig is not None:
        st, reason = "killed", SIGNAL_NAMES.get(sig, f"signal {sig}")
    elif "syntax_error" in lines:
        st, reason = "error", "syntax_error"
    elif exit_code != 0:
        st, reason = "error", "exit_code" if exit_code != 125 else "harness_child"
    else:
        st, reason = "ok", ""
    out, out_trunc = read_capped(f"{req['private_dir']}/out", req["max_output_bytes"])
    err, err_trunc = read_capped(f"{req['private_dir']}/err", req["max_output_bytes"])
    return {
        "status": st,
        "reason": reason,
        "exit_code": exit_code,
        "signal": sig,
        "time_s": round(elapsed, 4),
        "cpu_s": round(cpu_s, 4),
        "stdout": out,
        "stderr": err[-4000:],
        "truncated": out_trunc or err_trunc,
    }


def supervise(req):
    n, mode, nonce = len(req["cases"]), req["mode"], req["nonce"]
    cases = [None] * n
    i = 0
    while i < n:
        if time.monotonic() >= req["_total_deadline"]:
            for j in range(i, n):
                cases[j] = {"status": "timeout", "reason": "total_timeout", "skipped": True}
            break
        fresh_dirs(req)
        done = {}

        def on_progress(line):
            # "<nonce> <case index> <json>": a finished case resets the per-case clock.
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[0] == nonce and parts[1].isdigit() and i <= int(parts[1]) < n:
                done.setdefault(int(parts[1]), line)
                return True
            return False

        t0 = time.monotonic()
        stdin_text = req["cases"][i].get("stdin", "") if mode in ("program", "probe") else ""
        pid, r = spawn(req, i, stdin_text)
        why, status, cpu_s, lines = watch(req, pid, r, on_progress)
        res = outcome(req, why, status, cpu_s, lines, time.monotonic() - t0)
        res["lines"] = [ln for ln in lines if ln.startswith(nonce + " ")][: n + 1]
        if mode in ("program", "probe"):
            cases[i] = res
            i += 1
            if res["status"] != "ok" and req["stop_on_failure"]:
                break
            continue
        # function / assert: results arrive as nonce lines; the case running at a
        # timeout or crash takes the spawn's status, and the next spawn starts after it.
        for j, line in done.items():
            cases[j] = {"status": "ok", "reason": "", "result": line}
        j = i
        while j < n and j in done:
            j += 1
        load_error = next((ln for ln in res["lines"] if ln.startswith(nonce + " load ")), None)
        if res["reason"] == "syntax_error" or load_error is not None:
            if load_error is not None and res["status"] == "error":
                res.update(reason="load_error")
            for k in range(j, n):
                cases[k] = dict(res, result=load_error)
            break
        if j < n:
            if res["status"] == "ok":  # exited cleanly without reporting: os._exit before the result
                res.update(status="error", reason="no_result")
            cases[j] = res
            if req["stop_on_failure"]:
                break
        i = j + 1
    return {
        "ok": True,
        "cases": [c if c is not None else {"status": "skipped", "reason": "not_run", "skipped": True} for c in cases],
    }


def main():
    raw = sys.stdin.buffer.read()
    t0 = time.monotonic()
    stage = "request"
    try:
        req = marshal.loads(raw)
        req["_total_deadline"] = t0 + req["total_timeout_s"]
        if req["isolate"]:
            stage = "filesystem setup"
            build_root(req)
        setup_s = time.monotonic() - t0
        stage = "supervision"
        reply = supervise(req)
        reply["setup_s"] = round(setup_s, 4)
    except BaseException as exc:  # report, never hang: the host marks the sample invalid
        reply = {"ok": False, "error": f"{stage}: {type(exc).__name__}: {exc}"}
    data = memoryview(dumps(reply).encode())
    while data:
        data = data[os.write(1, data) :]
    os._exit(0)  # skip interpreter teardown: the host is waiting, and pid 1's exit ends the namespace


if __name__ == "__main__":
    main()
