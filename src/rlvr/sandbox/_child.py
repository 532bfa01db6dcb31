"""Code that runs in the forked child, inside the sandbox (imported by `_harness.py`).

`enter_child` is still trusted: it gives the child its own session, descriptors,
limits and an unprivileged uid. From `run_child` on, the untrusted program shares
this process, so nothing here is a security boundary: it only defends the cheap
exploits (exit before the checks, a result object whose __eq__ always says True,
a printed fake verdict), and every verdict is decided by the trusted parent.
"""

import _json
import _signal
import ctypes
import os
import resource
import sys

PR_SET_NO_NEW_PRIVS = 38

libc = ctypes.CDLL(None, use_errno=True)
try:  # loaded before the harness pivots into the private root, where the host's libraries are bound read-only
    libseccomp = ctypes.CDLL("libseccomp.so.2", use_errno=True)
except OSError:
    libseccomp = None

# A syscall filter (libseccomp) on top of the namespaces: kernel interfaces a test program never
# needs and sandbox escapes use. Everything else is allowed; these fail with EPERM.
DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "move_mount",
    "open_tree",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "open_by_handle_at",
    "name_to_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "fanotify_init",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
    "vhangup",
)
NEW_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
AF_UNIX = 1
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_NE, SCMP_CMP_MASKED_EQ = 1, 7
EPERM, ENOSYS, EAFNOSUPPORT = 1, 38, 97


class _ArgCmp(ctypes.Structure):  # struct scmp_arg_cmp
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


if libseccomp is not None:  # signatures, once per process (the forked children inherit them)
    libseccomp.seccomp_init.restype = ctypes.c_void_p
    libseccomp.seccomp_init.argtypes = [ctypes.c_uint32]
    libseccomp.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    libseccomp.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    libseccomp.seccomp_load.argtypes = [ctypes.c_void_p]
    libseccomp.seccomp_release.argtypes = [ctypes.c_void_p]


def install_syscall_filter():
    """Deny DENIED_SYSCALLS, sockets other than AF_UNIX (EAFNOSUPPORT), clone() into new namespaces,
    and clone3 (ENOSYS, whose flags a filter cannot read: libc falls back to clone). Needs
    no_new_privs; returns False where libseccomp is not installed (the report says so)."""
    if libseccomp is None:
        return False
    lib = libseccomp
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise OSError("seccomp_init failed")

    def rule(errno, name, *cmps):
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:  # not a syscall on this architecture
            return
        arr = (_ArgCmp * len(cmps))(*cmps) if cmps else None
        rc = lib.seccomp_rule_add_array(ctx, 0x00050000 | errno, nr, len(cmps), arr)
        if rc != 0:
            raise OSError(-rc, f"seccomp rule for {name} failed")

    try:
        for name in DENIED_SYSCALLS:
            rule(EPERM, name)
        rule(EAFNOSUPPORT, "socket", _ArgCmp(0, SCMP_CMP_NE, AF_UNIX, 0))
        rule(EAFNOSUPPORT, "socketpair", _ArgCmp(0, SCMP_CMP_NE, AF_UNIX, 0))
        for flag in NEW_NAMESPACE_FLAGS:  # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
            rule(EPERM, "clone", _ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag))
        rule(ENOSYS, "clone3")
        rc = lib.seccomp_load(ctx)
        if rc != 0:
            raise OSError(-rc, "seccomp_load failed")
    finally:
        lib.seccomp_release(ctx)
    return True


def dumps(x):
    """JSON for plain data (what `plain` returns and the reply is made of)."""
    t = type(x)
    if x is None:
        return "null"
    if t is bool:
        return "true" if x else "false"
    if t is int:
        return int.__repr__(x)
    if t is float:
        return (
            float.__repr__(x)
            if x == x and x not in (float("inf"), float("-inf"))
            else ("NaN" if x != x else ("Infinity" if x > 0 else "-Infinity"))
        )
    if t is str:
        return _json.encode_basestring_ascii(x)
    if t in (set, frozenset):
        try:
            x = sorted(x)  # a set has no order; compare it as a sorted list
        except TypeError:
            pass
        return "[" + ",".join(dumps(v) for v in x) + "]"
    if t in (list, tuple):
        return "[" + ",".join(dumps(v) for v in x) + "]"
    if t is dict:
        return "{" + ",".join(dumps(k if type(k) is str else dumps(k)) + ":" + dumps(v) for k, v in x.items()) + "}"
    raise TypeError(f"cannot encode {t.__name__}")


def drop_capabilities():
    """Root of a user namespace keeps its capabilities there; give them all up."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    if libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def enter_child(req, stdin_fd, out_fd, err_fd, *pipes):
    """In the forked child: own session, private descriptors (stdin, stdout, stderr, then `pipes`
    as 3, 4, ...; nothing else stays open), limits, unprivileged uid."""
    os.setsid()  # own process group, so a timeout kill reaches its children too
    wanted = (stdin_fd, out_fd, err_fd, *pipes)
    high = [os.dup(fd) for fd in wanted]  # out of the way first: a source may sit on a target's number
    for dst, src in enumerate(high):
        os.dup2(src, dst)
    os.closerange(len(wanted), 1 << 16)
    os.chdir(req["workdir"])
    lim = req["limits"]
    for res, value in (
        (resource.RLIMIT_CPU, lim["cpu_s"]),
        (resource.RLIMIT_AS, lim["as_bytes"]),
        (resource.RLIMIT_FSIZE, lim["fsize_bytes"]),
        (resource.RLIMIT_NOFILE, lim["nofile"]),
        (resource.RLIMIT_NPROC, lim["nproc"]),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(res, (value, value))  # soft = hard: the program cannot raise them
    os.nice(10)  # the trainer shares these cores
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)  # Python ignores it; past the file-size limit, stop
    if req["uid"] is not None:
        os.setgroups([])
        os.setresgid(req["gid"], req["gid"], req["gid"])
        os.setresuid(req["uid"], req["uid"], req["uid"])  # drops every capability
    elif os.geteuid() == 0:
        drop_capabilities()
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if req.get("seccomp", True):
        try:
            install_syscall_filter()
        except OSError:  # a kernel without seccomp: the start-up probe sees no filter and the report says so
            pass
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": req["workdir"], "LANG": "C.UTF-8"}
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
    sys.argv = ["solution.py"]
    sys.path[:] = req["sys_path"]  # -S skipped site; give the program the interpreter's usual path


def _print_exc():
    import traceback  # imports `re`: pay for it only when there is a traceback to print

    traceback.print_exc()


def _describe_exc():
    import traceback

    return "".join(traceback.format_exception_only(*sys.exc_info()[:2])).strip()[-500:]


def run_child(req, start):
    import atexit
    import builtins

    def _exit(code=None):
        raise SystemExit(code)

    builtins.exit = builtins.quit = _exit  # normally added by `site`
    nonce, res_fd = req["nonce"], 3

    def emit(tag, obj):
        os.write(res_fd, f"{nonce} {tag} {dumps(obj)}\n".encode())

    def finish(code):
        try:
            if "threading" in sys.modules:
                sys.modules["threading"]._shutdown()  # wait for non-daemon threads, as Python does at exit
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)

    module = type(sys)("__main__")
    module.__file__ = f"{req['workdir']}/solution.py"
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    try:
        code = compile(req["source"], module.__file__, "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        _print_exc()
        os.write(res_fd, b"syntax_error\n")
        finish(1)
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:
        if req["mode"] == "program":
            finish(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
        emit("load", "SystemExit while loading the solution")
        finish(1)
    except MemoryError:
        os.write(res_fd, b"memory\n")
        finish(1)
    except BaseException:
        _print_exc()
        if req["mode"] == "program":
            finish(1)
        emit("load", _describe_exc())
        finish(1)
    if req["mode"] == "program":
        finish(0)
    fn = module.__dict__.get(req["entry_point"])
    if not callable(fn):
        emit("load", f"entry point {req['entry_point']!r} is not defined")
        finish(1)
    if req["mode"] == "function":
        for i in range(start, len(req["cases"])):
            case = req["cases"][i]
            try:
                line = dumps({"value": plain(fn(*case.get("args", []), **case.get("kwargs", {})))})
            except MemoryError:
                line = dumps({"error": "MemoryError"})
            except BaseException as exc:
                line = dumps({"error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            os.write(res_fd, f"{nonce} {i} {line}\n".encode())
        finish(0)


def plain(x, depth=0):
    """Exact built-in data only (no subclasses, no custom __eq__): what JSON can carry."""
    t = type(x)
    if depth > 100:
        raise TypeError("result nested too deeply")
    if x is None or t in (bool, int, float, str):
        return x
    if t in (list, tuple):
        return t(plain(v, depth + 1) for v in x)
    if t in (set, frozenset):
        return t(plain(v, depth + 1) for v in x)
    if t is dict:
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in x.items()}
    raise TypeError(
        f"result of type {t.__name__} is not plain data (int, float, str, bool, None, list, tuple, dict, set)"
    )


def probe_child(req):
    """Facts seen from inside the sandbox, as the untrusted program would see them."""
    facts = {"uid": os.getuid(), "gid": os.getgid(), "env": sorted(os.environ), "cwd": os.getcwd()}
    for name in ("net", "mnt", "pid", "ipc", "uts"):
        facts[f"ns_{name}"] = os.readlink(f"/proc/self/ns/{name}")
    with open("/proc/self/status") as f:
        facts["cap_eff"] = next((ln.split()[1] for ln in f if ln.startswith("CapEff:")), "?")
    with open("/proc/net/dev") as f:
        facts["interfaces"] = [ln.split(":")[0].strip() for ln in f.readlines()[2:]]
    facts["processes"] = len([p for p in os.listdir("/proc") if p.isdigit()])
    with open("/proc/self/status") as f:
        facts["seccomp"] = next((ln.split()[1] for ln in f if ln.startswith("Seccomp:")), "?")  # 2 = filter
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            sock.connect(("127.0.0.1", 9))  # the discard port; only whether it is reachable matters
        facts["loopback"] = "connected"
    except OSError as exc:
        facts["loopback"] = exc.strerror or type(exc).__name__
    facts["host_marker_visible"] = os.path.exists(req["host_marker"])
    writes = {}
    for path in req["probe_paths"]:
        target = f"{path}.{req['nonce']}"  # unique, and removed at once if the write got through
        try:
            with open(target, "x") as f:
                f.write("x")
            os.unlink(target)
            writes[path] = "ok"
        except OSError as exc:
            writes[path] = exc.strerror
    facts["writes"] = writes
    with open("/proc/self/mountinfo") as f:
        facts["mounts"] = [(p[4], "ro" if "ro" in p[5].split(",") else "rw") for p in (ln.split() for ln in f)]
    facts["limits"] = {
        name: resource.getrlimit(getattr(resource, name))
        for name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_CORE")
    }
    return facts
