"""The math outcome verifier: extract → read the candidates → judge (fast path, or math-verify in a worker).

`components["correct"]` is 1.0 or 0.0, never partial credit. What scores 0 and why
(`info["flag"]`): no answer or one that cannot be read (`parse_failed`), several
different answers (`multiple_answers`), a relation where a value is due (`relation`),
words that are neither units nor the problem's count labels (`words`), a completion
over `max_chars` (`too_long`), a false equation chain (`false_equation`).
A verification that raises, or a completion whose extraction and verification
together exceed `timeout_s`, gives an invalid result.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rlvr.records import Problem, RewardResult
from rlvr.rewards.answers import Cand, Context, Parsed, analyse, context_of, judge
from rlvr.rewards.canonical import gold_text
from rlvr.config.reward import MathConfig
from rlvr.rewards.extract import PARSE_FAILED, extract
from rlvr.rewards.fastpath import cand_equal
from rlvr.rewards.pool import VerifyPool
from rlvr.rewards.units import conversion

TOO_LONG = "too_long"


def _outcome(correct: bool, flag: str | None, answers: list[str], policy: str | None, path: str) -> RewardResult:
    info = {
        "parse_failed": flag == PARSE_FAILED,
        "flag": flag,
        "answer": answers[0] if answers else None,
        "extracted": answers,
        "policy": policy,
        "path": path,
    }
    value = 1.0 if correct else 0.0
    return RewardResult(total=value, components={"correct": value}, info=info)


def _conversions(gold: Parsed, pred: Parsed) -> tuple:
    """Every unit conversion judging `pred` against `gold` can ask for, computed here so the
    workers never load the unit registry."""

    def units(cands: Sequence[Cand]) -> set[str]:
        return {u for c in cands for u in (c.unit, c.approx.unit if c.approx else None) if u}

    pred_units, gold_units = units(pred.cands), units(gold.cands)
    pairs = {(p, g) for p in pred_units for g in gold_units | pred_units if p != g}
    return tuple(sorted(((p, g), conversion(p, g)) for p, g in pairs))


@dataclass
class _Pending:
    index: int
    task: tuple
    answers: list[str]
    policy: str | None
    budget: float


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
    def gold(answer: str, ctx: Context = Context()) -> Parsed:
        return analyse(gold_text(answer), ctx, trusted=True)

    def _judge_here(self, problem: Problem, text: str) -> RewardResult | _Pending:
        """Everything up to the worker: extraction, reading the candidates, the fast path."""
        cfg = self.cfg
        ctx = context_of(problem.prompt)
        gold = self.gold(str(problem.answer), ctx)
        if gold.flag is not None:
            return RewardResult.invalid(
                f"problem {problem.id!r}: gold answer {problem.answer!r} cannot be graded ({gold.flag})",
                {"correct": 0.0},
            )
        if len(text) > cfg.max_chars:
            return _outcome(False, TOO_LONG, [], None, "extract")
        ex = extract(text, cfg.extract, cfg.max_answer_chars)
        if ex.flag is not None:
            return _outcome(False, ex.flag, ex.answers, ex.policy, "extract")
        parsed = [analyse(a, ctx) for a in ex.answers]
        flagged = next((p.flag for p in parsed if p.flag is not None), None)
        if flagged is not None:
            return _outcome(False, flagged, ex.answers, ex.policy, "extract")
        pred = Parsed(
            tuple(dict.fromkeys(c for p in parsed for c in p.cands)), relation=any(p.relation for p in parsed)
        )
        ok, flag = judge(gold, pred, lambda g, p: cand_equal(g, p, cfg.rel_tol, cfg.abs_tol))
        if ok is not None:
            return _outcome(ok, flag, ex.answers, ex.policy, "fast")
        task = (gold, pred, cfg.rel_tol, cfg.abs_tol, _conversions(gold, pred))
        return _Pending(-1, task, ex.answers, ex.policy, cfg.timeout_s)

    def verify(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[RewardResult]:
        results: list[RewardResult | None] = [None] * len(texts)
        slow: list[_Pending] = []
        for i, (problem, text) in enumerate(zip(problems, texts)):
            if not problem.answer or not str(problem.answer).strip():
                results[i] = RewardResult.invalid(f"problem {problem.id!r} has no gold answer", {"correct": 0.0})
                continue
            start = time.perf_counter()
            try:
                got = self._judge_here(problem, text)
            except Exception as exc:  # one sample's failure marks that sample, not the batch
                results[i] = RewardResult.invalid(
                    f"math verification failed: {type(exc).__name__}: {exc}", {"correct": 0.0}
                )
                continue
            spent = time.perf_counter() - start
            if isinstance(got, RewardResult):
                got.info["extract_s"] = round(spent, 5)
                results[i] = got
            elif spent >= self.cfg.timeout_s:
                results[i] = self._timed_out(spent)
            else:
                got.index, got.budget = i, self.cfg.timeout_s - spent
                slow.append(got)
        if slow:
            self._verify_slow(problems, slow, results)
        return [r if r is not None else RewardResult.invalid("not scored") for r in results]

    def _timed_out(self, seconds: float) -> RewardResult:
        r = RewardResult.invalid(f"math verification timeout: exceeded {self.cfg.timeout_s:g} s", {"correct": 0.0})
        r.info.update({"timeout": True, "verify_s": round(seconds, 4)})
        return r

    def _verify_slow(
        self, problems: Sequence[Problem], slow: list[_Pending], results: list[RewardResult | None]
    ) -> None:
        # A group of G completions often repeats the same answer: verify each distinct
        # (gold, answer) once, within the smallest budget any of them has left.
        budget: dict[tuple, float] = {}
        for s in slow:
            budget[s.task] = min(budget.get(s.task, s.budget), s.budget)
        unique = list(budget)
        outs = dict(zip(unique, self.pool.run("judge_sample", unique, [budget[t] for t in unique])))
        for s in slow:
            out = outs[s.task]
            if out.status == "ok":
                correct, flag = out.value
                results[s.index] = _outcome(correct, flag, s.answers, s.policy, "math-verify")
                results[s.index].info["verify_s"] = round(out.seconds, 4)
            elif out.status == "timeout":
                results[s.index] = self._timed_out(self.cfg.timeout_s - s.budget + out.seconds)
                results[s.index].info.update({"answer": s.answers[0], "extracted": s.answers})
            else:
                err = out.error or out.status
                if "GoldParseError" in err:
                    err = f"problem {problems[s.index].id!r}: {err.split(': ', 1)[-1]}"
                r = RewardResult.invalid(f"math verification {out.status}: {err}", {"correct": 0.0})
                r.info.update({"answer": s.answers[0], "extracted": s.answers, "verify_s": round(out.seconds, 4)})
                results[s.index] = r

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
