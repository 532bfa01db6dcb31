"""Throughput of the math verifier against calling math-verify directly, side by side in one run.

    .venv/bin/python bench/bench_math_verify.py [--n 2000] [--workers 2] [--batch 128] [--seed 0]

A "typical" mix of MATH/GSM8K-style answers (integers, fractions vs decimals,
radicals and pi, percentages, sets/intervals/tuples, equations, polynomials),
half right and half wrong, every value fresh so no cache can help either side.

- direct: `verify(parse(gold), parse(completion))` in this process, one by one,
  math-verify's defaults (its signal timeout) — what a trainer without a
  reward module would do;
- ours: `MathVerifier.verify` in batches of --batch (a trainer step), plain
  numbers on the in-process fast path, the rest in --workers worker processes
  with a hard wall-clock limit. Worker start-up is measured separately.

Prints verifications/s for both, the ratio, the fast-path share, and every
verdict on which the two disagree (our fixes of math-verify show up there).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rlvr.records import Problem  # noqa: E402
from rlvr.rewards.config import MathConfig  # noqa: E402
from rlvr.rewards.math_verifier import MathVerifier  # noqa: E402


def case(rng: random.Random, wrong: bool | None = None, style: random.Random | None = None) -> tuple[str, str]:
    """(gold, completion); right or wrong with equal odds unless `wrong` says. `style`
    (default: rng) picks the notation, so one problem can be answered several ways."""
    a, b, c = rng.randint(2, 999), rng.randint(2, 97), rng.randint(1, 9)
    wrong = rng.random() < 0.5 if wrong is None else wrong
    d = 1 if wrong else 0
    kind = rng.random()
    rng = style or rng
    if kind < 0.35:  # integers, GSM8K and MATH style
        gold, pred = str(a * 7), str(a * 7 + d)
        return (f"#### {gold}", f"Adding it all up.\n#### {pred}") if rng.random() < 0.3 else (gold, rf"\boxed{{{pred}}}")
    if kind < 0.50:  # fractions against decimals or other fractions
        g = rf"\frac{{{a}}}{{{2 ** c}}}"
        return g, rf"\boxed{{{(a + d) / 2 ** c}}}" if rng.random() < 0.5 else rf"\boxed{{\frac{{{2 * (a + d)}}}{{{2 ** (c + 1)}}}}}"
    if kind < 0.65:  # radicals and pi
        return rf"{c}\sqrt{{{b}}}", rf"\boxed{{\sqrt{{{c * c * b + d}}}}}"
    if kind < 0.70:  # percentages
        return rf"{a}\%", rf"\boxed{{{a + d}\%}}"
    if kind < 0.80:  # sets, intervals, tuples
        forms = [(rf"\{{{a}, {b}\}}", rf"\{{{b}, {a + d}\}}"), (rf"({a}, {a + b}]", rf"({a}, {a + b + d}]"),
                 (rf"({a}, -{b})", rf"({a}, -{b + d})")]
        g, p = rng.choice(forms)
        return g, rf"\boxed{{{p}}}"
    if kind < 0.90:  # equations
        return f"x = {a}", rf"\boxed{{x={a + d}}}" if rng.random() < 0.5 else rf"\boxed{{{a + d}}}"
    if kind < 0.95:  # polynomials
        return rf"x^2 + {2 * a}x + {a * a}", rf"\boxed{{(x+{a + d})^2}}"
    if rng.random() < 0.5:  # expressions with pi and radicals
        return rf"\frac{{{c}\pi}}{{{b}}}", rf"\boxed{{\frac{{{c + d}}}{{{b}}}\pi}}"
    return rf"{a} + \sqrt{{{b}}}", rf"\boxed{{\sqrt{{{b}}} + {a + d}}}"


def grouped(rng: random.Random, n: int, g: int) -> list[tuple[str, str]]:
    """n completions in groups of g per gold, as a GRPO step sees them: each completion
    is one of a few answers (right in two notations, or one of two wrong values)."""
    out = []
    for _ in range(n // g):
        seed = rng.random()
        variants = [case(random.Random(seed), wrong=k >= 2, style=random.Random(k)) for k in range(4)]
        gold = variants[0][0]
        out += [(gold, rng.choice(variants)[1]) for _ in range(g)]
    return out


def direct(cases: list[tuple[str, str]]) -> tuple[float, list[bool]]:
    from math_verify import parse, verify

    t = time.perf_counter()
    out = [bool(verify(parse(g if g.startswith("#") else f"${g}$"), parse(p))) for g, p in cases]
    return time.perf_counter() - t, out


def ours(cases: list[tuple[str, str]], workers: int, batch: int) -> tuple[float, float, list[bool], float]:
    v = MathVerifier(MathConfig(workers=workers))
    t = time.perf_counter()
    v.verify([Problem(id="w", prompt="", answer="x")], [r"\boxed{x}"])  # start the workers
    startup = time.perf_counter() - t
    problems = [Problem(id=str(i), prompt="", answer=g) for i, (g, _) in enumerate(cases)]
    texts = [p for _, p in cases]
    t = time.perf_counter()
    results = []
    for s in range(0, len(cases), batch):
        results += v.verify(problems[s:s + batch], texts[s:s + batch])
    elapsed = time.perf_counter() - t
    v.close()
    fast = sum(r.info.get("path") == "fast" for r in results) / len(results)
    return elapsed, startup, [r.components.get("correct") == 1.0 for r in results], fast


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--group", type=int, default=8, help="G for the GRPO-shaped run")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    from rlvr.rewards.extract import extract, normalise, parse_gold
    from rlvr.rewards.fastpath import fast_equal
    from rlvr.rewards.tolerance import Tolerance

    def needs_sympy(c: tuple[str, str]) -> bool:
        answers = extract(c[1], ["answer_tag", "boxed", "answer_line", "gsm8k"]).answers
        return any(fast_equal(parse_gold(c[0]).text, normalise(a), Tolerance()) is None for a in answers)

    unique = [case(rng) for _ in range(args.n)]
    # distinct pairs only, so neither side's caches help
    hard = list(dict.fromkeys(c for c in (case(rng) for _ in range(20 * args.n)) if needs_sympy(c)))[:args.n // 4]
    runs = {"unique pairs (every gold and answer fresh: worst case)": unique,
            f"GRPO-shaped (groups of {args.group} completions per gold)": grouped(rng, args.n, args.group),
            "math-verify path only (answers the fast path cannot decide)": hard}
    for title, cases in runs.items():
        n = len(cases)
        t_ours, startup, v_ours, fast = ours(cases, args.workers, args.batch)
        t_direct, v_direct = direct(cases)
        print(f"{title}: {n} verifications, {args.workers} workers, batches of {args.batch}")
        print(f"  direct math-verify : {n / t_direct:8.1f} /s  ({t_direct:.2f} s)")
        print(f"  rlvr MathVerifier  : {n / t_ours:8.1f} /s  ({t_ours:.2f} s; worker start-up {startup:.2f} s "
              f"not included; {fast:.0%} on the fast path)")
        print(f"  ratio ours/direct  : {t_direct / t_ours:8.2f}x")
        diff = [(c, a, b) for c, a, b in zip(cases, v_ours, v_direct) if a != b]
        print(f"  verdicts that differ: {len(diff)} of {n}")
        for (g, p), a, b in diff[:10]:
            print(f"    gold {g!r} completion {p!r}: ours {a}, math-verify {b}")


if __name__ == "__main__":
    main()
