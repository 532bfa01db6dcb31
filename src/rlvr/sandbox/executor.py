"""Host side of one sandboxed execution.

    sandbox = open_sandbox(cfg)           # detects isolation once, see sandbox.report
    run = sandbox.execute("program", source, [{"stdin": "1 2\\n"}])
    run.cases[0]["status"], run.cases[0]["stdout"]

Each execution runs `_harness.py` as pid 1 of fresh namespaces, forked by the
fork server (`forkserver.py`) or started by `unshare` (see `isolation.py`),
sends it the request (source and case inputs, never expected outputs) and reads
back one JSON reply. The parent enforces the wall clock: past `timeout_s +
grace_s` it SIGKILLs pid 1 (through a pidfd) or the launcher's process group,
and the kernel then kills everything left in the pid namespace.
"""

from __future__ import annotations

import json
import marshal
import math
import os
import random
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlvr.config.code import CodeConfig
from rlvr.sandbox.forkserver import ForkServer, exchange
from rlvr.sandbox.isolation import IsolationPlan, IsolationReport, build_report, plans_to_try

HARNESS = Path(__file__).with_name("_harness.py")
# Only these reach the sandbox launcher: nothing from the parent's environment (tokens, keys).
LAUNCH_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
SYSTEM_RO_PATHS = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
]
Mode = Literal["program", "function", "assert", "probe"]


@dataclass
class Execution:
    ok: bool
    """False when the sandbox itself failed (could not start, crashed, overran its budget):
    the sample is then invalid, not wrong."""
    cases: list[dict[str, Any]] = field(default_factory=list)
    """Per case: status (ok|timeout|memory|killed|error), reason, exit_code, signal, time_s,
    stdout, stderr, truncated, and `result` (the raw '<nonce> <i> <json>' line) for function/assert."""
    nonce: str = ""
    error: str | None = None
    wall_s: float = 0.0
    setup_s: float = 0.0
    lines: list[str] = field(default_factory=list)


@dataclass
class Interpreter:
    executable: str
    sys_path: list[str]
    roots: list[str]
    """Directories the interpreter needs (its prefixes), bound read-only into the sandbox."""

    @classmethod
    def inspect(cls, executable: str) -> "Interpreter":
        code = "import sys, json; print(json.dumps([sys.path, sys.prefix, sys.base_prefix, sys.exec_prefix]))"
        out = subprocess.run(
            [executable, "-I", "-c", code], capture_output=True, text=True, env=LAUNCH_ENV, timeout=60, check=True
        ).stdout
        sys_path, *prefixes = json.loads(out)
        roots = [os.path.realpath(p) for p in prefixes] + list(prefixes)
        return cls(executable, sys_path, sorted(set(roots)))


def _without_nested(paths: list[str]) -> list[str]:
    out: list[str] = []
    for p in sorted(set(os.path.normpath(p) for p in paths), key=len):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


class Sandbox:
    """Runs untrusted programs under one isolation plan. Thread-safe."""

    def __init__(self, cfg: CodeConfig, plan: IsolationPlan, interpreter: Interpreter) -> None:
        self.cfg, self.plan, self.interpreter = cfg, plan, interpreter
        wanted = SYSTEM_RO_PATHS + interpreter.roots + list(cfg.extra_ro_paths)
        self.ro_paths = _without_nested([p for p in wanted if os.path.lexists(p)])
        # Top-level symlinks (/bin -> usr/bin) are recreated, not bound; keep them first.
        self.ro_paths.sort(key=lambda p: not (os.path.islink(p) and os.path.dirname(p) == "/"))
        # Without a mount namespace the program sees the host's files: another uid only
        # works if it can reach the interpreter (here it may live under a 0700 /root).
        self.drop_uid = plan.drop_uid and (plan.isolate or all(_others_can_reach(r) for r in interpreter.roots))
        self.report: IsolationReport | None = None
        self._server: ForkServer | None = None
        self._uids: set[int] = set()
        self._lock = threading.Lock()
        self._rng = random.Random(secrets.randbits(64))

    def _take_uid(self) -> int:
        with self._lock:
            while True:
                uid = self.cfg.uid_base + self._rng.randrange(self.cfg.uid_count)
                if uid not in self._uids:
                    self._uids.add(uid)
                    return uid

    def _release_uid(self, uid: int | None) -> None:
        with self._lock:
            self._uids.discard(uid)

    def limits(self, mode: Mode, case_timeout_s: float, total_timeout_s: float) -> dict[str, int]:
        # One function-mode process runs many cases in a row, so its CPU limit covers the total.
        cpu = total_timeout_s if mode in ("function", "assert") else case_timeout_s
        return {
            "cpu_s": math.ceil(cpu) + 1,
            "as_bytes": self.cfg.memory_mb << 20,
            "fsize_bytes": self.cfg.max_file_mb << 20,
            "nofile": self.cfg.max_open_files,
            "nproc": self.cfg.max_processes,
        }

    def execute(
        self,
        mode: Mode,
        source: str,
        cases: list[dict[str, Any]],
        *,
        entry_point: str | None = None,
        test: str | None = None,
        stop_on_failure: bool = False,
        case_timeout_s: float | None = None,
        total_timeout_s: float | None = None,
        host_marker: str = "",
    ) -> Execution:
        case_t = float(case_timeout_s or self.cfg.case_timeout_s)
        total_t = float(total_timeout_s or self.cfg.timeout_s)
        nonce = secrets.token_hex(16)
        uid = self._take_uid() if self.drop_uid else None
        tmp = tempfile.mkdtemp(prefix="rlvr-sandbox-") if not self.plan.isolate else None
        isolated_dirs = {"workdir": "/sandbox", "private_dir": "/.h"}
        host_dirs = {"workdir": f"{tmp}/work", "private_dir": f"{tmp}/h"}
        req = {
            "mode": mode,
            "source": source,
            "cases": cases,
            "entry_point": entry_point,
            "test": test,
            "nonce": nonce,
            "stop_on_failure": stop_on_failure,
            "case_timeout_s": case_t,
            "total_timeout_s": total_t,
            "limits": self.limits(mode, case_t, total_t),
            "uid": uid,
            "gid": uid,
            "ro_paths": self.ro_paths,
            "tmpfs_mb": self.cfg.tmpfs_mb,
            "seccomp": self.cfg.seccomp,
            "max_output_bytes": self.cfg.max_output_bytes,
            "isolate": self.plan.isolate,
            "total_memory_bytes": self.cfg.total_memory_mb << 20,
            "sys_path": self.interpreter.sys_path,
            "python": self.interpreter.executable,
            "host_marker": host_marker,
            # Where the probe tries to write. Without a mount namespace these are host paths:
            # then only the run's own directory, never system directories.
            "probe_paths": [
                "/probe-write",
                "/usr/probe-write",
                self.interpreter.roots[0] + "/probe-write",
                "/sandbox/probe-write",
                "/tmp/probe-write",
            ]
            if self.plan.isolate
            else [f"{tmp}/work/probe-write"],
            **(isolated_dirs if self.plan.isolate else host_dirs),
        }
        if tmp:
            os.mkdir(f"{tmp}/h", 0o700)
            if uid is not None:
                os.chmod(tmp, 0o711)
        t0 = time.perf_counter()
        try:
            if self.plan.server:
                return self._run_in_server(req, total_t + self.cfg.grace_s, nonce, t0)
            argv = self.plan.prefix + [self.interpreter.executable, "-I", "-S", "-B", str(HARNESS)]
            return self._launch(argv, req, total_t + self.cfg.grace_s, nonce, t0)
        finally:
            self._release_uid(uid)
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)

    def _launch(self, argv: list[str], req: dict, hard_timeout: float, nonce: str, t0: float) -> Execution:
        try:
            # New session: the launcher, the harness and anything the harness forks share one
            # process group that a single killpg reaches.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=LAUNCH_ENV,
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            return Execution(False, nonce=nonce, error=f"could not start the sandbox: {exc}")
        try:
            out, err = proc.communicate(encode_request(req), timeout=hard_timeout)
        except subprocess.TimeoutExpired:
            _killpg(proc.pid)  # unshare is not reaped yet, so its pid (= the group id) is still ours
            proc.communicate()
            return Execution(
                False,
                nonce=nonce,
                wall_s=time.perf_counter() - t0,
                error=f"sandbox did not finish within {hard_timeout:.1f} s and was killed",
            )
        except BaseException:
            if proc.returncode is None:
                _killpg(proc.pid)
                proc.wait()
            raise
        # A normal exit needs no kill: unshare waited for the harness, pid 1 of the
        # namespace, and the kernel killed everything else in it when that exited.
        return _reply(out, err, f"exit status {proc.returncode}", nonce, t0)

    def _run_in_server(self, req: dict, hard_timeout: float, nonce: str, t0: float) -> Execution:
        (stdin_r, stdin_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
        try:
            if self._server is None:
                with self._lock:
                    self._server = self._server or ForkServer(self.interpreter.executable, LAUNCH_ENV)
            pidfd = self._server.spawn([stdin_r, out_w, err_w])
        except OSError as exc:
            for fd in (stdin_w, out_r, err_r):
                os.close(fd)
            return Execution(False, nonce=nonce, error=f"could not start the sandbox: {exc}")
        finally:
            for fd in (stdin_r, out_w, err_w):  # the sandbox holds its own copies now
                os.close(fd)
        try:
            out, err, finished = exchange(stdin_w, out_r, err_r, encode_request(req), time.monotonic() + hard_timeout)
            if not finished:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)  # pid 1: the whole namespace goes
            # Return only once pid 1 has exited, which the kernel completes after every other
            # process of its namespace is gone: nothing of this run outlives the call.
            select.select([pidfd], [], [], 10.0)
        finally:
            os.close(pidfd)
        if not finished:
            return Execution(
                False,
                nonce=nonce,
                wall_s=time.perf_counter() - t0,
                error=f"sandbox did not finish within {hard_timeout:.1f} s and was killed",
            )
        return _reply(out, err, "no reply", nonce, t0)

    def close(self) -> None:
        """Stop the fork server, if one was started."""
        if self._server is not None:
            self._server.close()
            self._server = None


def encode_request(req: dict) -> bytes:
    """Everything that enters the sandbox, as bytes (marshal: the harness reads it fast)."""
    return marshal.dumps(req)


def _reply(out: bytes, err: bytes, status: str, nonce: str, t0: float) -> Execution:
    wall = time.perf_counter() - t0
    try:
        reply = json.loads(out)
    except ValueError:
        detail = err.decode("utf-8", "replace").strip()[-800:] or status
        return Execution(False, nonce=nonce, wall_s=wall, error=f"sandbox crashed: {detail}")
    if not reply.get("ok"):
        return Execution(False, nonce=nonce, wall_s=wall, error=f"sandbox failed: {reply.get('error')}")
    return Execution(True, reply["cases"], nonce, wall_s=wall, setup_s=reply.get("setup_s", 0.0))


def _others_can_reach(path: str) -> bool:
    parts = Path(path).resolve().parts
    return all(os.stat(os.path.join(*parts[:k])).st_mode & 0o001 for k in range(1, len(parts) + 1))


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def probe_facts(sandbox: Sandbox, host_marker: str) -> tuple[dict | None, str | None]:
    run = sandbox.execute("probe", "", [{}], host_marker=host_marker)  # the configured limits, as reported
    if not run.ok:
        return None, run.error
    for line in run.cases[0].get("lines", []):
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == run.nonce and parts[1] == "probe":
            return json.loads(parts[2]), None
    case = run.cases[0]
    return None, f"probe child failed: {case.get('reason')} {case.get('stderr', '')[-500:].strip()}"


def open_sandbox(cfg: CodeConfig) -> Sandbox:
    """Detect the strongest isolation that works on this machine (by running a probe in it)
    and return a sandbox using it, with `sandbox.report` saying exactly what is active."""
    # sys.executable, not its real path: a venv's python is a symlink and the venv holds site-packages.
    interpreter = Interpreter.inspect(cfg.python or sys.executable)
    marker_dir = tempfile.mkdtemp(prefix="rlvr-probe-")
    marker = os.path.join(marker_dir, "host-only")
    Path(marker).write_text("only the host can see this file\n")
    os.chmod(marker_dir, 0o755)
    os.chmod(marker, 0o644)  # readable by anyone, so only the filesystem view can hide it
    try:
        plans, tried = plans_to_try(cfg), []
        for k, plan in enumerate(plans):
            sandbox = Sandbox(cfg, plan, interpreter)
            facts, error = probe_facts(sandbox, marker) if plan.unavailable is None else (None, plan.unavailable)
            sandbox.report = build_report(cfg, plan, sandbox.ro_paths, sandbox.drop_uid, facts, error, tried)
            tried.append(sandbox.report)
            if sandbox.report.meets_requirements or k == len(plans) - 1:
                return sandbox
            sandbox.close()
        raise AssertionError("plans_to_try returned no plan")
    finally:
        shutil.rmtree(marker_dir, ignore_errors=True)
