"""Recall set: rlvr's math verifier and plain math-verify, side by side, on other projects' own test cases.

    .venv/bin/python bench/bench_math_recall.py [--data tests/data/math_recall.jsonl] [--json FILE]

The cases (tests/data/math_recall.jsonl: id, source, gold, answer, expected) are the
(gold, prediction, verdict) triples that four other projects assert in their own tests,
strings kept byte for byte as the peer's test feeds them (a Python literal is taken as
the string it evaluates to, so a peer's over-escaped `\\\\boxed` stays a double backslash):

- huggingface/Math-Verify @ 5d148cfaaf99214c2e4ffb4bc497ab042c592a7a:
  tests/test_all.py, test_numina_cases.py, test_open_thoughts.py, test_yujianll.py,
  test_boxed.py, test_strict.py (205 cases; their compare_strings parses with
  LatexExtractionConfig(boxed_match_priority=0) and/or ExprExtractionConfig, some tests latex-only
  or expr-only, float_rounding=6, strict=True: kept, and scored below with math-verify's defaults)
- NVIDIA/NeMo-Skills @ 0b012df8a09cd4730d31b16e90a0d8f13d145fb8:
  tests/test_math_equal.py (math_equal(a, b) and math_equal(b, a) are both asserted, so each
  pair gives two cases; non-string inputs such as 5 / 2 taken as str(), as math_equal does; 55)
- hendrycks/math @ 985bdc1696e88e8643f081a0ff4719da39f2ae2a:
  modeling/math_equivalence_test.py (is_equiv(test_in, test_out); the evaluators call
  is_equiv(model_output, answer), so test_out is the gold and test_in the answer; 16)
- UKGovernmentBEIS/inspect_ai @ 499e6152e7b8fc8cbd8ac5283536572aa6e4ab17:
  tests/scorer/math_cases.json and tests/scorer/test_math.py (the math() scorer: target is
  the gold, the model output the answer; 78)

Left out (86 of the 440 triples found): 53 predictions that are prose with no \\boxed (they
test the peer's free-text extraction, which rlvr deliberately does not do, not equivalence);
1 gold that is a worked solution with no \\boxed; 8 cases under a non-default peer option
(Math-Verify precision=2 or 5, strict=False, allow_set_relation_comp=True); 7 inspect_ai
code-injection payloads (plain math-verify's expression parser would evaluate them); 2
NeMo-Skills cases with None as an input; 1 Math-Verify case asserting 1 - 1/e == 1 + 1/e
(a quirk of its \\mathrm{e} handling); 14 exact duplicates within a repository.
Kept although policy-dependent: percent stripping (`10\\%` == `10`, NeMo-Skills and
hendrycks/math), order-sensitive lists (`10, 4, -2` != `4, 10, -2`, hendrycks/math),
the last box wins (inspect_ai), several boxes read as one set (Math-Verify).

Scoring, per case:

(a) rlvr: MathVerifier(MathConfig()).verify([Problem(id, prompt="", answer=gold)], [completion]),
    credited = r.valid and r.components["correct"] == 1.0. The completion mirrors how the peer
    feeds the answer: a string that already contains \\boxed (or \\fbox) is passed as it is
    (the peers feed whole completions, and rlvr's `boxed` policy reads them); a string that is
    one math span ($...$, $$...$$, \\(...\\), \\[...\\]) becomes
    `The final answer is $\\boxed{<inside>}$.`; a bare answer becomes
    `The final answer is $\\boxed{<answer>}$.`; an answer with unescaped $...$ spans next to
    text (`$28$ percent`, `odd $n$`) becomes `The final answer is <answer>.` (read by the
    `answer_line` policy), since nesting it in $\\boxed{...}$ would break its math spans.
(b) math-verify 0.9 directly: verify(parse(gold), parse(answer)) with default configs,
    parsing_timeout and timeout_seconds = --timeout, in a worker process with a
    --memory-mb address-space limit and a hard wall-clock kill; any exception, kill or
    timeout counts as not credited.

Prints, per source repository: n, and for each verifier the agreement with the peer's verdict
(accuracy), false positives (credited, peer says not equal) and false negatives; then the cases
where rlvr is wrong and math-verify right. --json FILE writes the figures, those lists and the
per-case verdicts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import resource
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]

from rlvr.records import Problem  # noqa: E402
from rlvr.config.reward import MathConfig  # noqa: E402
from rlvr.rewards.math_verifier import MathVerifier  # noqa: E402

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_DOLLAR_RE = re.compile(r"(?<!\\)\$")
_SPANS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def whole_span(s: str) -> str | None:
    """The inside of `s` when all of it is one math span, else None."""
    t = s.strip()
    for a, b in _SPANS:
        if len(t) >= len(a) + len(b) and t.startswith(a) and t.endswith(b):
            inner = t[len(a) : len(t) - len(b)]
            if a in ("$", "$$") and _DOLLAR_RE.search(inner):
                continue  # `$1$ and $2$`: several spans, not one
            if a in ("\\(", "\\[") and (a in inner or b in inner):
                continue
            return inner.strip()
    return None


def wrapping(answer: str) -> str:
    """Which of the four wrappings `completion` gives `answer`."""
    if _BOX_RE.search(answer):
        return "as_is"
    if whole_span(answer) is not None:
        return "span_boxed"
    return "answer_line" if _DOLLAR_RE.search(answer) else "boxed"


def completion(answer: str) -> str:
    """The answer as a completion rlvr's extractor reads (see the module docstring)."""
    kind = wrapping(answer)
    if kind == "as_is":
        return answer
    if kind == "span_boxed":
        return f"The final answer is $\\boxed{{{whole_span(answer)}}}$."
    if kind == "answer_line":
        return f"The final answer is {answer}."
    return f"The final answer is $\\boxed{{{answer}}}$."


# --- math-verify, in a worker process that can be killed -------------------------------------


def _limit_memory(mb: int) -> None:
    limit = mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _mv_case(gold: str, answer: str, timeout: int) -> tuple[bool, str | None]:
    from math_verify import parse, verify

    try:
        g = parse(gold, parsing_timeout=timeout)
        p = parse(answer, parsing_timeout=timeout)
        return bool(verify(g, p, timeout_seconds=timeout)), None
    except BaseException as exc:  # noqa: BLE001 - MemoryError, RecursionError, TimeoutException...
        return False, f"{type(exc).__name__}: {str(exc)[:120]}"


class MathVerifyRunner:
    def __init__(self, timeout: int, memory_mb: int) -> None:
        self.timeout, self.memory_mb = timeout, memory_mb
        self.pool = self._start()

    def _start(self):
        return mp.get_context("fork").Pool(1, initializer=_limit_memory, initargs=(self.memory_mb,))

    def __call__(self, gold: str, answer: str) -> tuple[bool, str | None]:
        job = self.pool.apply_async(_mv_case, (gold, answer, self.timeout))
        try:
            return job.get(timeout=3 * self.timeout + 5)  # two parses and a verify, each bounded
        except mp.TimeoutError:
            self.pool.terminate()
            self.pool = self._start()
            return False, "killed: wall-clock limit"
        except Exception as exc:  # noqa: BLE001
            return False, f"{type(exc).__name__}: {str(exc)[:120]}"

    def close(self) -> None:
        self.pool.terminate()


# --- scoring ---------------------------------------------------------------------------------


def score_rlvr(cases: list[dict]) -> tuple[list[dict], float]:
    verifier = MathVerifier(MathConfig())
    t = time.perf_counter()
    try:
        problems = [Problem(c["id"], prompt="", answer=c["gold"]) for c in cases]
        results = verifier.verify(problems, [completion(c["answer"]) for c in cases])
    finally:
        verifier.close()
    spent = time.perf_counter() - t
    out = []
    for r in results:
        credited = bool(r.valid and r.components.get("correct") == 1.0)
        why = r.info.get("flag") if r.valid else f"invalid: {(r.error or '')[:160]}"
        out.append({"credited": credited, "why": why, "extracted": r.info.get("extracted"), "path": r.info.get("path")})
    return out, spent


def score_math_verify(cases: list[dict], timeout: int, memory_mb: int) -> tuple[list[dict], float]:
    runner = MathVerifyRunner(timeout, memory_mb)
    t = time.perf_counter()
    try:
        out = []
        for c in cases:
            ok, err = runner(c["gold"], c["answer"])
            out.append({"credited": ok, "why": err})
    finally:
        runner.close()
    return out, time.perf_counter() - t


def figures(rows: list[dict], side: str) -> dict:
    n = len(rows)
    right = sum(r[side]["credited"] == bool(r["expected"]) for r in rows)
    fp = sum(r[side]["credited"] and not r["expected"] for r in rows)
    fn = sum(not r[side]["credited"] and r["expected"] for r in rows)
    return {"accuracy": round(right / n, 4) if n else None, "agree": right, "false_pos": fp, "false_neg": fn}


def short(s: str, n: int = 110) -> str:
    s = s.replace("\n", "\\n")
    return s if len(s) <= n else s[: n - 1] + "…"


def entry(r: dict) -> dict:
    return {
        "id": r["id"],
        "source": r["source"],
        "gold": r["gold"],
        "answer": r["answer"],
        "expected": r["expected"],
        "rlvr_why": r["rlvr"]["why"],
        "rlvr_extracted": r["rlvr"]["extracted"],
        "math_verify_credited": r["math_verify"]["credited"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT / "tests/data/math_recall.jsonl")
    ap.add_argument("--json", type=Path, default=None, help="write the figures and the lists here")
    ap.add_argument("--timeout", type=int, default=5, help="math-verify parsing_timeout and timeout_seconds")
    ap.add_argument("--memory-mb", type=int, default=2048, help="address-space limit of the math-verify worker")
    args = ap.parse_args()

    cases = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    rl, rl_s = score_rlvr(cases)
    mv, mv_s = score_math_verify(cases, args.timeout, args.memory_mb)
    rows = [dict(c, rlvr=a, math_verify=b) for c, a, b in zip(cases, rl, mv)]

    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["source"].split("@")[0]].append(r)
    groups["all"] = rows
    table = {}
    print(
        f"{'source':30s} {'n':>4s} {'pos':>4s} | {'rlvr acc':>8s} {'FP':>3s} {'FN':>3s} | {'m-v acc':>8s} {'FP':>3s} {'FN':>3s}"
    )
    for name, rs in groups.items():
        a, b = figures(rs, "rlvr"), figures(rs, "math_verify")
        table[name] = {"n": len(rs), "expected_equal": sum(r["expected"] for r in rs), "rlvr": a, "math_verify": b}
        print(
            f"{name:30s} {len(rs):4d} {table[name]['expected_equal']:4d} | {a['accuracy']:8.3f} {a['false_pos']:3d} "
            f"{a['false_neg']:3d} | {b['accuracy']:8.3f} {b['false_pos']:3d} {b['false_neg']:3d}"
        )

    rlvr_wrong = [r for r in rows if r["rlvr"]["credited"] != bool(r["expected"])]
    lists = {
        # what the other engineer must look at: rlvr wrong, math-verify right
        "rlvr_refuses_mv_credits": [entry(r) for r in rlvr_wrong if r["expected"] and r["math_verify"]["credited"]],
        "rlvr_credits_mv_refuses": [
            entry(r) for r in rlvr_wrong if not r["expected"] and not r["math_verify"]["credited"]
        ],
        # every false positive of rlvr, and the false negatives both sides share
        "rlvr_false_positives": [entry(r) for r in rlvr_wrong if not r["expected"]],
        "both_refuse": [entry(r) for r in rlvr_wrong if r["expected"] and not r["math_verify"]["credited"]],
        "mv_wrong_rlvr_right": [
            entry(r)
            for r in rows
            if r["rlvr"]["credited"] == bool(r["expected"]) and r["math_verify"]["credited"] != bool(r["expected"])
        ],
    }
    for key, title in (
        ("rlvr_refuses_mv_credits", "rlvr refuses, math-verify credits, peer says equal"),
        ("rlvr_false_positives", "rlvr credits, peer says NOT equal"),
    ):
        print(f"\n{title} ({len(lists[key])}):")
        for e in lists[key]:
            print(
                f"  {e['id']}: gold {short(e['gold'], 70)!r}  answer {short(e['answer'])!r}  [{e['rlvr_why']}]"
                + ("" if key != "rlvr_false_positives" else f"  math-verify credits: {e['math_verify_credited']}")
            )
    wraps = dict(Counter(wrapping(c["answer"]) for c in cases))
    print(f"\nrlvr {rl_s:.1f} s, math-verify {mv_s:.1f} s for {len(rows)} cases; completions: {wraps}")

    if args.json:
        out = {
            "data": str(args.data.relative_to(ROOT) if args.data.is_relative_to(ROOT) else args.data),
            "cases": len(rows),
            "wrapping": wraps,
            "seconds": {"rlvr": round(rl_s, 2), "math_verify": round(mv_s, 2)},
            "table": table,
            "lists": {k: v for k, v in lists.items()},
            "verdicts": [
                {
                    "id": r["id"],
                    "expected": r["expected"],
                    "rlvr": r["rlvr"]["credited"],
                    "rlvr_why": r["rlvr"]["why"],
                    "math_verify": r["math_verify"]["credited"],
                    "math_verify_error": r["math_verify"]["why"],
                }
                for r in rows
            ],
        }
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
