"""Bounded pool of sandboxed executions, with the metrics a training step logs.

A fixed number of worker threads (`reward.code.max_parallel`) each drive one
sandbox at a time; further work waits in the executor's queue. Every task
returns an `Execution`, never raises: a sandbox that crashes or overruns its
budget comes back with ok=False and the sample is marked invalid.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rlvr.sandbox.executor import Execution, Sandbox


class ExecutionPool:
    def __init__(self, sandbox: Sandbox, max_parallel: int) -> None:
        self.sandbox = sandbox
        self._executor = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="sandbox")
        self._lock = threading.Lock()
        self._reset(time.perf_counter())

    def _reset(self, now: float) -> None:
        self._since = now
        self._executions = self._invalid = self._cases = self._timeouts = 0
        self._exec_s = self._queue_s = 0.0
        self._reasons: Counter[str] = Counter()

    def submit(self, mode: str, source: str, cases: list[dict[str, Any]], **kwargs: Any) -> "Future[Execution]":
        queued = time.perf_counter()
        return self._executor.submit(self._run, queued, mode, source, cases, kwargs)

    def _run(
        self, queued: float, mode: str, source: str, cases: list[dict[str, Any]], kwargs: dict[str, Any]
    ) -> Execution:
        started = time.perf_counter()
        try:
            run = self.sandbox.execute(mode, source, cases, **kwargs)  # type: ignore[arg-type]
        except Exception as exc:  # a bug or OS failure here must cost one sample, not the step
            run = Execution(False, error=f"sandbox error: {type(exc).__name__}: {exc}")
        with self._lock:
            self._executions += 1
            self._queue_s += started - queued
            self._exec_s += time.perf_counter() - started
            if not run.ok:
                self._invalid += 1
                self._reasons["sandbox_failure"] += 1
            for case in run.cases:
                self._cases += 1
                self._timeouts += case["status"] == "timeout"
        return run

    def count_reasons(self, reasons: Counter[str]) -> None:
        """Failure reasons decided by the judge (wrong_answer, ...), added by the verifier."""
        with self._lock:
            self._reasons.update(reasons)

    def metrics(self) -> dict[str, float]:
        """`sandbox/...` figures since the previous call (one training step, typically)."""
        now = time.perf_counter()
        with self._lock:
            n, elapsed = self._executions, max(now - self._since, 1e-9)
            out = {
                "sandbox/executions": float(n),
                "sandbox/executions_per_s": n / elapsed,
                "sandbox/cases": float(self._cases),
                "sandbox/timeout_rate": self._timeouts / self._cases if self._cases else 0.0,
                "sandbox/invalid": float(self._invalid),
                "sandbox/exec_s_mean": self._exec_s / n if n else 0.0,
                "sandbox/queue_s_mean": self._queue_s / n if n else 0.0,
            }
            out.update({f"sandbox/fail/{reason}": float(k) for reason, k in sorted(self._reasons.items())})
            self._reset(now)
        return out

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self.sandbox.close()
