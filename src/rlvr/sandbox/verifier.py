"""`CodeVerifier`: the outcome reward of code problems, run in the sandbox.

    verifier = CodeVerifier(cfg.reward.code)      # probes isolation; refuses if required and missing
    results = verifier.verify(problems, texts)    # one RewardResult per text, components["correct"]
    verifier.metrics()                            # sandbox/... keys for the step's metrics
    verifier.close()

Model output never makes `verify` raise: no code, a syntax error, a crash, a
timeout all score 0 with the reason in `info`. A sandbox that itself failed
marks the sample invalid; a malformed `tests` field (bad gold) does too.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future

from rlvr.records import Problem, RewardResult
from rlvr.sandbox.cases import TestFormatError, TestSpec, judge, parse_tests, sandbox_cases
from rlvr.config.code import CodeConfig
from rlvr.sandbox.executor import Execution, open_sandbox
from rlvr.sandbox.extract import extract_code
from rlvr.sandbox.pool import ExecutionPool

log = logging.getLogger("rlvr.sandbox")


class SandboxUnavailable(RuntimeError):
    """Required isolation cannot be set up on this machine; the message says what is missing."""


class CodeVerifier:
    def __init__(self, cfg: CodeConfig) -> None:
        self.cfg = cfg
        self.sandbox = open_sandbox(cfg)
        report = self.sandbox.report
        assert report is not None
        if not report.meets_requirements:
            if cfg.require_isolation:
                raise SandboxUnavailable(report.text())
            log.warning("%s", report.text())
        else:
            log.info("%s", report.text())
        self.pool = ExecutionPool(self.sandbox, cfg.max_parallel)

    def verify(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[RewardResult]:
        results: list[RewardResult | None] = [None] * len(texts)
        pending: dict[tuple[str, str], tuple[TestSpec, Future[Execution], list[int]]] = {}
        reasons: Counter[str] = Counter()
        for i, (problem, text) in enumerate(zip(problems, texts)):
            try:
                spec = parse_tests(problem.tests)
            except TestFormatError as exc:
                results[i] = RewardResult.invalid(f"problem {problem.id}: {exc}", {"correct": 0.0})
                reasons["bad_tests"] += 1
                continue
            code = extract_code(text, self.cfg.extract)
            if code is None:
                results[i] = RewardResult(0.0, {"correct": 0.0}, info={"reason": "no_code"})
                reasons["no_code"] += 1
                continue
            code = spec.prefix + code
            key = (problem.id, code)  # a group often repeats a completion: run it once
            if key not in pending:
                # an assert test's checker runs the trusted prefix (helpers the check code may call) before it
                test = spec.prefix + spec.test if spec.test is not None else None
                future = self.pool.submit(
                    spec.mode,
                    code,
                    sandbox_cases(spec),
                    entry_point=spec.entry_point,
                    test=test,
                    stop_on_failure=self.cfg.scoring == "all_or_nothing",
                )
                pending[key] = (spec, future, [])
            pending[key][2].append(i)
        for spec, future, idx in pending.values():
            result = self._score(spec, future.result(), reasons)
            for i in idx:
                results[i] = RewardResult(
                    result.total, dict(result.components), result.valid, result.error, dict(result.info)
                )
        self.pool.count_reasons(reasons)
        return [r if r is not None else RewardResult.invalid("not scored", {"correct": 0.0}) for r in results]

    def _score(self, spec: TestSpec, run: Execution, reasons: Counter[str]) -> RewardResult:
        if not run.ok:
            return RewardResult.invalid(run.error or "sandbox failed", {"correct": 0.0})
        verdicts = judge(spec, run)
        if any(v.reason == "check_error" for v in verdicts):
            reasons["check_error"] += 1
            return RewardResult.invalid(
                f"the problem's check code failed by itself ({_check_error(run)}): "
                "a helper it calls belongs in tests.prefix",
                {"correct": 0.0},
            )
        passed = sum(v.passed for v in verdicts)
        n = len(spec.cases)
        correct = passed / n if self.cfg.scoring == "fraction" else float(passed == n)
        failures = Counter(v.reason for v in verdicts if not v.passed)
        reasons.update(failures)
        info = {"passed": passed, "cases": n, "failures": dict(failures), "exec_s": round(run.wall_s, 4)}
        first_bad = next((c for c, v in zip(run.cases, verdicts) if not v.passed), None)
        if first_bad is not None and first_bad.get("stderr"):
            info["stderr_tail"] = first_bad["stderr"][-500:]
        return RewardResult(correct, {"correct": correct}, info=info)

    def metrics(self) -> dict[str, float]:
        return self.pool.metrics()

    def close(self) -> None:
        self.pool.close()


def _check_error(run: Execution) -> str:
    import json

    line = (run.cases[0].get("result") or "").split(" ", 2)
    try:
        return str(json.loads(line[2]).get("error", "?"))
    except (IndexError, ValueError):
        return "?"
