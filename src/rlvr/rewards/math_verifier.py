"""The math outcome verifier: extract → refuse ambiguity → fast path or math-verify in a worker.

`components["correct"]` is 1.0 or 0.0, never partial credit. Output that
cannot be parsed unambiguously scores 0 with `info["parse_failed"] = True`;
several different final answers score 0 with `info["flag"] = "multiple_answers"`.
A verification that raises or exceeds `timeout_s` gives an invalid result.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from rlvr.records import Problem, RewardResult
from rlvr.rewards.config import MathConfig
from rlvr.rewards.extract import MULTIPLE_ANSWERS, PARSE_FAILED, Gold, extract, hedges, normalise, parse_gold
from rlvr.rewards.fastpath import fast_equal
from rlvr.rewards.pool import VerifyPool
from rlvr.rewards.tolerance import Tolerance


def _outcome(correct: bool, flag: str | None, answers: list[str], policy: str | None, path: str) -> RewardResult:
    info = {"parse_failed": flag == PARSE_FAILED, "flag": flag, "answer": answers[0] if answers else None,
            "policy": policy, "path": path}
    value = 1.0 if correct else 0.0
    return RewardResult(total=value, components={"correct": value}, info=info)


def _key(task: tuple) -> tuple:
    gold, decimals, preds, rel, abs_ = task
    return gold, decimals, tuple(preds), rel, abs_


def _task(key: tuple) -> tuple:
    gold, decimals, preds, rel, abs_ = key
    return gold, decimals, list(preds), rel, abs_


class MathVerifier:
    def __init__(self, cfg: MathConfig) -> None:
        self.cfg = cfg
        self._pool: VerifyPool | None = None

    @property
    def pool(self) -> VerifyPool:
        # Started on first need only: a batch of plain-number answers never pays for workers.
        if self._pool is None:
            self._pool = VerifyPool(self.cfg.workers, self.cfg.timeout_s, self.cfg.worker_memory_mb)
        return self._pool

    @property
    def pool_started(self) -> bool:
        return self._pool is not None

    @staticmethod
    @functools.lru_cache(maxsize=65536)
    def gold(answer: str) -> Gold:
        return parse_gold(answer)

    def _fast(self, gold: Gold, preds: list[str]) -> bool | None:
        """Simple answers on both sides (see fastpath.py): no sympy, no worker."""
        tol = Tolerance(self.cfg.rel_tol, self.cfg.abs_tol, gold.decimals)
        verdicts = [fast_equal(gold.text, p, tol) for p in preds]
        return None if any(v is None for v in verdicts) else all(verdicts)

    def verify(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[RewardResult]:
        results: list[RewardResult | None] = [None] * len(texts)
        slow: list[tuple[int, tuple, list[str], str | None]] = []
        for i, (problem, text) in enumerate(zip(problems, texts)):
            if not problem.answer or not str(problem.answer).strip():
                results[i] = RewardResult.invalid(f"problem {problem.id!r} has no gold answer",
                                                  {"correct": 0.0})
                continue
            gold = self.gold(str(problem.answer))
            ex = extract(text, self.cfg.extract, self.cfg.max_answer_chars)
            if ex.flag is not None:
                results[i] = _outcome(False, ex.flag, ex.answers, ex.policy, "extract")
                continue
            preds = list(dict.fromkeys(normalise(a) for a in ex.answers))
            if any(hedges(p, gold.text) for p in preds):
                results[i] = _outcome(False, MULTIPLE_ANSWERS, preds, ex.policy, "extract")
                continue
            fast = self._fast(gold, preds)
            if fast is not None:
                flag = MULTIPLE_ANSWERS if not fast and len(preds) > 1 else None
                results[i] = _outcome(fast, flag, preds, ex.policy, "fast")
                continue
            task = (gold.text, gold.decimals, preds, self.cfg.rel_tol, self.cfg.abs_tol)
            slow.append((i, task, preds, ex.policy))
        if slow:
            # A group of G completions often repeats the same answer: verify each distinct
            # (gold, answers) once. Same inputs, same verdict, so this cannot change a score.
            unique = list(dict.fromkeys(_key(task) for _, task, _, _ in slow))
            by_key = dict(zip(unique, self.pool.run("verify_sample", [_task(k) for k in unique])))
            for (i, task, preds, policy) in slow:
                out = by_key[_key(task)]
                if out.status == "ok":
                    correct, flag = out.value
                    if not correct and flag is None and len(preds) > 1:
                        flag = MULTIPLE_ANSWERS  # several different final answers: never credit
                    results[i] = _outcome(correct, flag, preds, policy, "math-verify")
                    results[i].info["verify_s"] = round(out.seconds, 4)
                else:
                    err = out.error or out.status
                    if "GoldParseError" in err:
                        err = f"problem {problems[i].id!r}: {err.split(': ', 1)[-1]}"
                    results[i] = RewardResult.invalid(f"math verification {out.status}: {err}", {"correct": 0.0})
                    results[i].info.update({"timeout": out.status == "timeout", "answer": preds[0],
                                            "verify_s": round(out.seconds, 4)})
        return [r if r is not None else RewardResult.invalid("not scored") for r in results]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
