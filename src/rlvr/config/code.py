"""Configuration of code execution (section `reward.code`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class CodeConfig:
    require_isolation: bool = True
    """Refuse to run code rewards when network/filesystem/process isolation cannot be set up
    (the start-up report says what is missing and how to get it)."""
    isolation: Literal["auto", "namespaces", "user_namespaces", "none"] = "auto"
    """'auto': the strongest that works here: 'namespaces' (as root: new net/mount/pid/ipc/uts
    namespaces and an unused uid per run), 'user_namespaces' (not root: the same inside a user
    namespace, without a uid change), or 'none' (rlimits and a temporary directory only)."""
    seccomp: bool = True
    """A syscall filter (libseccomp) on top of the isolation: no ptrace, mount, new namespaces,
    kernel modules, bpf, io_uring, ... and no sockets but AF_UNIX. Asked for, it is required with
    the isolation (require_isolation): missing, code rewards are refused; false: no filter."""
    max_parallel: int = 2
    """Sandboxed executions running at once (the rest wait in a queue)."""
    timeout_s: float = 10.0
    """Wall-clock budget of one execution (all cases of one sample). Cases not reached in it
    fail. The host kills a sandbox that overruns it by `grace_s` and marks the sample invalid."""
    case_timeout_s: float = 3.0
    """Wall-clock limit of one test case; the CPU-time limit is derived from it."""
    grace_s: float = 5.0
    """Extra time the host waits for the sandbox itself (start-up, reporting) before killing it."""
    scoring: Literal["fraction", "all_or_nothing"] = "fraction"
    """'fraction': `correct` is the fraction of cases passed; 'all_or_nothing': 1 only if all pass
    (execution then stops at the first failing case)."""
    extract: Literal["last_python_block", "last_block", "whole_text"] = "last_python_block"
    """Where the program is in a completion: the last ```python (or ```py) fenced block, the last
    fenced block of any language, or the whole completion text."""
    memory_mb: int = 1024
    """Address-space limit (RLIMIT_AS) of each process of the program."""
    total_memory_mb: int = 2048
    """Resident memory of all the program's processes together (checked every 20 ms by the
    supervisor, which kills the run past it); 0 turns the check off."""
    max_processes: int = 64
    """Processes and threads the program may have at once (RLIMIT_NPROC, per sandbox uid)."""
    max_open_files: int = 256
    max_file_mb: int = 16
    """Largest file the program may write (RLIMIT_FSIZE); stdout/stderr count as files."""
    max_output_bytes: int = 1 << 20
    """stdout/stderr kept per case; longer output is truncated (and fails a stdio comparison)."""
    tmpfs_mb: int = 64
    """Size of each of the program's writable directories (/sandbox, /tmp, /dev/shm), in memory."""
    python: str = ""
    """Interpreter for the programs; empty: the one running rlvr."""
    extra_ro_paths: list[str] = field(default_factory=list)
    """Host paths made visible read-only inside the sandbox (besides system libraries and the
    interpreter). Never add data directories: a program could read expected outputs there."""
    uid_base: int = 2_000_000_000
    uid_count: int = 1_000_000
    """Each execution runs as a uid drawn from [uid_base, uid_base + uid_count) that no other
    running execution uses, so the process limit counts only that execution's processes."""

    def __post_init__(self) -> None:
        if self.max_parallel < 1:
            raise ValueError("max_parallel must be >= 1")
        if min(self.timeout_s, self.case_timeout_s, self.grace_s) <= 0:
            raise ValueError("timeout_s, case_timeout_s and grace_s must be > 0")
        if self.total_memory_mb < 0:
            raise ValueError("total_memory_mb must be >= 0 (0: no check)")
        if (
            min(
                self.memory_mb,
                self.max_processes,
                self.max_open_files,
                self.max_file_mb,
                self.max_output_bytes,
                self.tmpfs_mb,
                self.uid_count,
            )
            < 1
        ):
            raise ValueError(
                "memory_mb, max_processes, max_open_files, max_file_mb, max_output_bytes, "
                "tmpfs_mb and uid_count must be >= 1"
            )
        if not 0 < self.uid_base <= 4_294_967_294 - self.uid_count:
            raise ValueError("uid_base: must leave room for uid_count uids below 2**32 - 1")
