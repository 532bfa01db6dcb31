"""Online A/B testing of two checkpoints behind the same routes (`rlvr serve A --model-b B --split P`).

Each user goes to one arm for good: the arm is a hash of serve.ab_salt and the user id (the
`x-rlvr-user` header, else OpenAI's `user`, else Anthropic's `metadata.user_id`), B when it falls
under P; a request without a user id is assigned at random and counted as anonymous. A request
whose metadata carries verifiable ground truth (`answer` for math, `tests` for code, as in rlvr's
data files) is scored with rlvr's verifiers once its response is complete, off the event loop.

`GET /ab` reports per arm the requests, users and verified accuracy, and the comparison that
`rlvr compare` makes: problems (same prompt and ground truth) answered by both arms are paired,
with a paired-bootstrap interval of B - A and an exact McNemar p-value, and one verdict line.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlvr.records import Problem
from rlvr.sandbox.cases import TestFormatError, parse_tests
from rlvr.serve.errors import APIError
from rlvr.stats import paired_report

log = logging.getLogger("rlvr.serve")


def ground_truth(metadata: dict[str, Any] | None, key: str) -> Problem | None:
    """The verifiable problem a request's metadata names, or None; a malformed one is a 400."""
    metadata = metadata or {}
    answer, tests = metadata.get("answer"), metadata.get("tests")
    if answer is None and tests is None:
        return None
    if tests is not None:
        try:
            tests = json.loads(tests) if isinstance(tests, str) else tests
            parse_tests(tests)
        except (ValueError, TestFormatError) as exc:
            raise APIError(400, f"metadata.tests: {exc}", param="metadata.tests") from None
        return Problem(id=key, prompt="", tests=tests, verifier="code", source="serve")
    if not isinstance(answer, (str, int, float)):
        raise APIError(400, "metadata.answer: expected a string", param="metadata.answer")
    return Problem(id=key, prompt="", answer=str(answer), verifier="math", source="serve")


def problem_key(prompt_ids: list[int], problem: Problem) -> str:
    """Requests with the same prompt and ground truth are the same problem (paired across arms)."""
    truth = json.dumps([problem.answer, problem.tests], sort_keys=True)
    return hashlib.sha256(json.dumps([prompt_ids, truth]).encode()).hexdigest()[:16]


class ABTest:
    def __init__(self, arms: list[str], split: float, salt: str, reward, metrics, seed: int = 0) -> None:
        self.arms, self.split, self.salt = arms, split, salt
        self.reward, self.metrics = reward, metrics
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.requests = {a: 0 for a in arms}
        self.anonymous = {a: 0 for a in arms}
        self.users: dict[str, set[str]] = {a: set() for a in arms}
        self.outcomes: dict[str, dict[str, list[float]]] = {a: {} for a in arms}
        """arm -> problem key -> correctness of each verified response."""
        self.failed = {a: 0 for a in arms}
        """Verifications that could not run (an invalid reward): counted, not scored as wrong."""
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rlvr-verify")

    def assign(self, user: str | None) -> str:
        """The arm of this user (the first one when there is a single arm)."""
        if len(self.arms) == 1:
            arm = self.arms[0]
        elif user:
            h = int.from_bytes(hashlib.sha256(f"{self.salt}:{user}".encode()).digest()[:8], "big") / 2**64
            arm = self.arms[1] if h < self.split else self.arms[0]
        else:
            arm = self.arms[1] if self._random.random() < self.split else self.arms[0]
        with self._lock:
            self.requests[arm] += 1
            if user:
                self.users[arm].add(user)
            else:
                self.anonymous[arm] += 1
        self.metrics.ab_requests.labels(arm=arm).inc()
        return arm

    def verify(self, arm: str, problem: Problem, text: str) -> asyncio.Future:
        """Score `text` against the problem in the verifier thread; the outcome lands in the tally."""
        return asyncio.get_running_loop().run_in_executor(self._pool, self._score, arm, problem, text)

    def _score(self, arm: str, problem: Problem, text: str) -> None:
        try:
            result = self.reward.score([problem], [text])[0]
        except Exception:  # a verifier crash must not take the server down
            log.exception("verifying a response of arm %s failed", arm)
            result = None
        with self._lock:
            if result is None or not result.valid:
                self.failed[arm] += 1
                return
            correct = float(result.components.get("correct", 0.0) >= 1.0 - 1e-9)
            self.outcomes[arm].setdefault(problem.id, []).append(correct)
        self.metrics.ab_verified.labels(arm=arm, correct=str(bool(correct)).lower()).inc()

    def report(self, *, alpha: float = 0.05, iterations: int = 10000) -> dict[str, Any]:
        with self._lock:
            outcomes = {a: {k: list(v) for k, v in per.items()} for a, per in self.outcomes.items()}
            arms = {}
            for a in self.arms:
                scores = [x for v in outcomes[a].values() for x in v]
                arms[a] = {
                    "requests": self.requests[a],
                    "users": len(self.users[a]),
                    "anonymous": self.anonymous[a],
                    "verified": len(scores),
                    "verify_failed": self.failed[a],
                    "accuracy": sum(scores) / len(scores) if scores else None,
                }
        report: dict[str, Any] = {"split": self.split, "arms": arms}
        if len(self.arms) == 2:
            a, b = self.arms
            shared = sorted(set(outcomes[a]) & set(outcomes[b]))
            paired = {"n": len(shared)}
            if shared:
                mean = lambda v: sum(v) / len(v)  # noqa: E731
                paired |= paired_report(
                    [mean(outcomes[a][k]) for k in shared],
                    [mean(outcomes[b][k]) for k in shared],
                    alpha=alpha,
                    iterations=iterations,
                    seed=0,
                )
            else:
                paired["verdict"] = "no problem verified on both arms yet"
            report["paired"] = paired
        return report

    def close(self) -> None:
        self._pool.shutdown(wait=True)
