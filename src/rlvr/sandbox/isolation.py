"""Which isolation this machine supports, and a report of what is actually active.

Plans, strongest first:
  namespaces       root: new net/mount/pid/ipc/uts namespaces, private root filesystem,
                   programs run as an unused uid (so RLIMIT_NPROC applies); started by
                   the fork server (`_server.py`), or else by `unshare` (util-linux)
  user_namespaces  not root: the same inside a user namespace; no uid change, but all
                   capabilities are dropped
  none             only rlimits, a temporary directory and a process-group kill

The report is built from facts a probe program observed *inside* the sandbox
(its namespace ids against the host's, the interfaces it sees, which writes
fail, whether a host file is visible, its uid, capabilities and limits), not
from what we meant to set up.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from rlvr.config.code import CodeConfig

REQUIRED = ("network", "filesystem", "processes")
NAMESPACE_FLAGS = ["--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--propagation", "private"]
INSTALL_UNSHARE = (
    "the `unshare` command is missing: install util-linux "
    "(Debian/Ubuntu: apt-get install util-linux; Fedora/RHEL: dnf install util-linux)"
)
HINTS = {
    "namespaces": "creating namespaces as root failed; in a container allow it (docker run --cap-add SYS_ADMIN "
    "--security-opt seccomp=unconfined --security-opt apparmor=unconfined, or --privileged)",
    "user_namespaces": "unprivileged user namespaces are disabled; enable them (sysctl -w "
    "kernel.unprivileged_userns_clone=1 and user.max_user_namespaces=10000; on Ubuntu 24.04+ "
    "also kernel.apparmor_restrict_unprivileged_userns=0) or run rlvr as root",
    "none": "reward.code.isolation is 'none': set it to 'auto' to use namespaces",
}


@dataclass(frozen=True)
class IsolationPlan:
    name: str
    prefix: list[str]
    """Command put before `python _harness.py`."""
    isolate: bool
    """The harness builds a private root filesystem (needs a mount namespace)."""
    drop_uid: bool
    unavailable: str | None = None
    """Why this plan cannot even be tried, and how to fix that."""
    server: bool = False
    """Start sandboxes from a long-lived fork server (`_server.py`) instead of `unshare` + a
    fresh interpreter each time: same namespaces, a fraction of the start-up cost."""

    @property
    def label(self) -> str:
        return f"{self.name} ({'fork server' if self.server else 'unshare' if self.prefix else 'no launcher'})"


def plans_to_try(cfg: CodeConfig) -> list[IsolationPlan]:
    unshare = shutil.which("unshare", path="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
    root = os.geteuid() == 0
    plans = {
        "namespaces": IsolationPlan(
            "namespaces",
            [str(unshare), *NAMESPACE_FLAGS],
            True,
            True,
            None
            if unshare and root
            else INSTALL_UNSHARE
            if not unshare
            else "needs root (rlvr is not running as root)",
        ),
        "user_namespaces": IsolationPlan(
            "user_namespaces",
            [str(unshare), "--user", "--map-root-user", *NAMESPACE_FLAGS],
            True,
            False,
            None if unshare else INSTALL_UNSHARE,
        ),
        "none": IsolationPlan("none", [], False, root),
    }
    # As root the fork server makes the namespaces itself (no `unshare` needed); if it
    # fails here, the `unshare` launcher is tried next.
    served = IsolationPlan("namespaces", [], True, True, None if root else "needs root", server=True)
    by_name = {
        "namespaces": [served, plans["namespaces"]],
        "user_namespaces": [plans["user_namespaces"]],
        "none": [plans["none"]],
    }
    if cfg.isolation != "auto":
        return by_name[cfg.isolation]
    return by_name["namespaces"] * root + [plans["user_namespaces"], plans["none"]]


@dataclass
class IsolationReport:
    plan: str
    protections: dict[str, tuple[bool, str]] = field(default_factory=dict)
    """name -> (active, what exactly is in force)."""
    missing: list[str] = field(default_factory=list)
    """Required protections that are not active, each with how to get it."""
    require: bool = True
    required: tuple[str, ...] = REQUIRED
    """The protections a run needs: REQUIRED, and 'syscalls' when reward.code.seccomp asks for the filter."""

    @property
    def meets_requirements(self) -> bool:
        return all(self.protections.get(name, (False, ""))[0] for name in self.required)

    def text(self) -> str:
        verdict = (
            "all required protections active"
            if self.meets_requirements
            else "REQUIRED PROTECTIONS MISSING: "
            + (
                "code rewards refused (reward.code.require_isolation=true)"
                if self.require
                else "running anyway (require_isolation=false)"
            )
        )
        lines = [f"code sandbox: isolation '{self.plan}' - {verdict}"]
        for name, (active, what) in self.protections.items():
            lines.append(f"  {name:<12} {'active ' if active else 'MISSING'}  {what}")
        lines += [f"  to fix: {m}" for m in self.missing]
        return "\n".join(lines)


def _host_ns() -> dict[str, str]:
    return {name: os.readlink(f"/proc/self/ns/{name}") for name in ("net", "mnt", "pid", "ipc", "uts")}


def _mib(n: int) -> str:
    return f"{n >> 20} MiB"


def build_report(
    cfg: CodeConfig,
    plan: IsolationPlan,
    ro_paths: list[str],
    drop_uid: bool,
    facts: dict[str, Any] | None,
    error: str | None,
    tried: list[IsolationReport],
) -> IsolationReport:
    report = IsolationReport(
        plan.label, require=cfg.require_isolation, required=REQUIRED + (("syscalls",) if cfg.seccomp else ())
    )
    for earlier in tried:
        report.missing += [f"[{earlier.plan}] {m}" for m in earlier.missing]
    if facts is None:
        for name in REQUIRED:
            report.protections[name] = (False, f"not set up: {error}")
        report.missing.append(
            f"[{plan.name}] {error}; {HINTS[plan.name]}"
            if plan.name != "none" or cfg.isolation == "none"
            else f"[none] {error}"
        )
        return report
    host = _host_ns()
    own = {name: facts[f"ns_{name}"] != host[name] for name in host}
    p = report.protections
    net_ok = own["net"] and facts["interfaces"] == ["lo"]
    p["network"] = (
        net_ok,
        f"{'own' if own['net'] else 'HOST'} network namespace; interfaces: "
        f"{', '.join(facts['interfaces'])}; connect to 127.0.0.1 -> {facts['loopback']}",
    )
    writes = facts["writes"]
    outside_blocked = all(v != "ok" for k, v in writes.items() if not k.startswith(("/sandbox/", "/tmp/")))
    fs_ok = own["mnt"] and not facts["host_marker_visible"] and outside_blocked
    if plan.isolate:
        what = (
            f"private root; read-only: {', '.join(sorted(ro_paths))}; writable, fresh per run, in memory "
            f"({cfg.tmpfs_mb} MiB each): /sandbox (working directory), /tmp, /dev/shm; every other host path is absent"
        )
    else:
        what = "host filesystem, writable wherever the running uid may write"
    p["filesystem"] = (
        fs_ok,
        what + ("" if fs_ok else f"; probe: host file visible={facts['host_marker_visible']}, writes={writes}"),
    )
    p["processes"] = (
        own["pid"],
        f"own pid namespace ({facts['processes']} processes visible); every process left after a case is killed"
        if own["pid"]
        else "no pid namespace: only the process group (and the sandbox uid, if any) is killed; "
        "a daemon that leaves both can survive",
    )
    unprivileged = facts["uid"] != 0 and facts["cap_eff"].strip("0") == ""
    if facts["uid"] != 0:
        who = f"uid {facts['uid']}, a fresh unused uid per run" if drop_uid else f"uid {facts['uid']}"
    else:
        who = (
            f"root of a user namespace (mapped to host uid {os.geteuid()})"
            if plan.name == "user_namespaces"
            else "root"
        )
    caps = "no capabilities" if facts["cap_eff"].strip("0") == "" else f"capabilities {facts['cap_eff']}"
    p["user"] = (
        unprivileged or (plan.name == "user_namespaces" and caps == "no capabilities"),
        f"{who}; {caps}; no_new_privs",
    )
    p["environment"] = (
        set(facts["env"]) <= {"PATH", "HOME", "LANG"},
        f"empty except {', '.join(facts['env'])} (nothing from the parent)",
    )
    lim = {k: v[0] for k, v in facts["limits"].items()}
    soft_hard = all(v[0] == v[1] for v in facts["limits"].values())
    # The kernel never applies RLIMIT_NPROC to host root (also when mapped from a user namespace).
    nproc_applies = facts["uid"] != 0 or (plan.name == "user_namespaces" and os.geteuid() != 0)
    p["limits"] = (
        soft_hard and nproc_applies,
        f"cpu {lim['RLIMIT_CPU']} s, address space {_mib(lim['RLIMIT_AS'])}, file size "
        f"{_mib(lim['RLIMIT_FSIZE'])}, open files {lim['RLIMIT_NOFILE']}, processes "
        f"{lim['RLIMIT_NPROC']}{'' if nproc_applies else ' (NOT enforced: runs as root)'}, core dumps "
        f"{lim['RLIMIT_CORE']}; soft = hard: {soft_hard}; wall clock {cfg.case_timeout_s:g} s per case, "
        f"{cfg.timeout_s:g} s per run; resident memory of all processes "
        + (f"{cfg.total_memory_mb} MiB" if cfg.total_memory_mb and own["pid"] else "NOT watched"),
    )
    if facts.get("seccomp") == "2":
        p["syscalls"] = (
            True,
            "seccomp filter: no ptrace, mount, new namespaces, kernel modules, bpf, "
            "io_uring, keyrings or clock setting; sockets AF_UNIX only",
        )
    else:
        p["syscalls"] = (
            False,
            "no syscall filter (reward.code.seccomp=false, or libseccomp is not installed or "
            "the kernel refused the filter)",
        )
    p["ipc, uts"] = (
        own["ipc"] and own["uts"],
        "own ipc and uts namespaces" if own["ipc"] and own["uts"] else "shared with the host",
    )
    for name in REQUIRED:
        if not p[name][0]:
            report.missing.append(f"[{plan.name}] {name} isolation is not active; {HINTS[plan.name]}")
    if cfg.seccomp and not p["syscalls"][0]:
        report.missing.append(
            f"[{plan.name}] the syscall filter asked for (reward.code.seccomp=true) is not active: "
            "apt-get install libseccomp2 (and a kernel with seccomp), or set reward.code.seccomp=false"
        )
    return report
