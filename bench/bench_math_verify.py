"""Throughput of the math verifier, side by side in one run, and its worst case on attacks.

    .venv/bin/python bench/bench_math_verify.py [--n 2000] [--baseline REV] [--rounds 3] [--json FILE]
    .venv/bin/python bench/bench_math_verify.py --attacks [--json FILE]

Three mixes of MATH/GSM8K-style answers (integers, fractions vs decimals, radicals and pi,
percentages, sets/intervals/tuples, equations, polynomials), half right and half wrong:

- unique pairs: every gold and answer fresh, so no cache helps (worst case);
- GRPO-shaped: groups of --group completions per gold, as a training step sees them;
- math-verify path only: answers the fast path cannot decide.

Each mix is scored by `MathVerifier.verify` in batches of --batch (worker start-up timed
apart) and by math-verify called directly (`verify(parse(gold), parse(answer))`, one by
one). With --baseline REV the same cases are also scored by the verifier of git revision
REV (its src/ exported to a temporary folder), each side in a fresh interpreter, the two
sides alternating for --rounds rounds; the best time of each side is kept and the ratio
printed. --attacks times extraction + verdict of adversarial completions of 50-390 KB
(marker + whitespace, unclosed boxes and tags, nesting, separators) in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
        return (
            (f"#### {gold}", f"Adding it all up.\n#### {pred}") if rng.random() < 0.3 else (gold, rf"\boxed{{{pred}}}")
        )
    if kind < 0.50:  # fractions against decimals or other fractions
        g = rf"\frac{{{a}}}{{{2**c}}}"
        return (
            g,
            rf"\boxed{{{(a + d) / 2**c}}}"
            if rng.random() < 0.5
            else rf"\boxed{{\frac{{{2 * (a + d)}}}{{{2 ** (c + 1)}}}}}",
        )
    if kind < 0.65:  # radicals and pi
        return rf"{c}\sqrt{{{b}}}", rf"\boxed{{\sqrt{{{c * c * b + d}}}}}"
    if kind < 0.70:  # percentages
        return rf"{a}\%", rf"\boxed{{{a + d}\%}}"
    if kind < 0.80:  # sets, intervals, tuples
        forms = [
            (rf"\{{{a}, {b}\}}", rf"\{{{b}, {a + d}\}}"),
            (rf"({a}, {a + b}]", rf"({a}, {a + b + d}]"),
            (rf"({a}, -{b})", rf"({a}, -{b + d})"),
        ]
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


def mixes(n: int, group: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """The three mixes. The math-verify-only one keeps the pairs whose answer is not a plain
    number, radical or `x = number` (what every version's fast path decides)."""
    import re

    rng = random.Random(seed)
    simple = re.compile(
        r"\\boxed\{(-?[\d.]+|x=-?[\d.]+|\\frac\{\d+\}\{\d+\}|\d*\\sqrt\{\d+\}|-?\d+\\%"
        r"|\\\{[-\d, ]+\\\}|[(\[][-\d, ]+[)\]])\}$|####"
    )
    unique = [case(rng) for _ in range(n)]
    hard = list(dict.fromkeys(c for c in (case(rng) for _ in range(20 * n)) if not simple.search(c[1])))[: n // 4]
    return {"unique": unique, "grpo": grouped(rng, n, group), "math_verify_only": hard}


TITLES = {
    "unique": "unique pairs (every gold and answer fresh: worst case)",
    "grpo": "GRPO-shaped (groups of completions per gold)",
    "math_verify_only": "math-verify path only (answers the fast path cannot decide)",
}


def ours(cases: list[tuple[str, str]], workers: int, batch: int) -> dict:
    """Runs in the interpreter of the side being measured (its rlvr on sys.path)."""
    from rlvr.records import Problem
    from rlvr.config.reward import MathConfig
    from rlvr.rewards.math_verifier import MathVerifier

    v = MathVerifier(MathConfig(workers=workers))
    t = time.perf_counter()
    v.verify([Problem(id="w", prompt="", answer="x")], [r"\boxed{x}"])  # start the workers
    startup = time.perf_counter() - t
    problems = [Problem(id=str(i), prompt="", answer=g) for i, (g, _) in enumerate(cases)]
    texts = [p for _, p in cases]
    t = time.perf_counter()
    results = []
    for s in range(0, len(cases), batch):
        results += v.verify(problems[s : s + batch], texts[s : s + batch])
    elapsed = time.perf_counter() - t
    v.close()
    return {
        "seconds": elapsed,
        "startup_s": startup,
        "correct": [r.components.get("correct") == 1.0 for r in results],
        "fast": sum(r.info.get("path") == "fast" for r in results) / len(results),
    }


def direct(cases: list[tuple[str, str]]) -> tuple[float, list[bool]]:
    from math_verify import parse, verify

    t = time.perf_counter()
    out = [bool(verify(parse(g if g.startswith("#") else f"${g}$"), parse(p))) for g, p in cases]
    return time.perf_counter() - t, out


def side(src: Path, cases_file: Path, workers: int, batch: int) -> dict:
    """Score every mix with the verifier of `src` in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(cases_file), "--workers", str(workers), "--batch", str(batch)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def export(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def throughput(args: argparse.Namespace) -> dict:
    runs = mixes(args.n, args.group, args.seed)
    report: dict = {"n": args.n, "workers": args.workers, "batch": args.batch, "mixes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        cases_file = Path(tmp) / "cases.json"
        cases_file.write_text(json.dumps(runs))
        sides = {"current": ROOT / "src"}
        if args.baseline:
            sides[f"baseline {args.baseline}"] = export(args.baseline, Path(tmp))
        best: dict[str, dict] = {}
        for r in range(args.rounds):
            for name, src in sides.items() if r % 2 == 0 else reversed(sides.items()):
                got = side(src, cases_file, args.workers, args.batch)
                for mix, res in got.items():
                    key = f"{name}/{mix}"
                    if key not in best or res["seconds"] < best[key]["seconds"]:
                        best[key] = res
        sys.path.insert(0, str(ROOT / "src"))
        for mix, cases in runs.items():
            n = len(cases)
            t_direct, v_direct = direct(cases)
            print(f"{TITLES[mix]}: {n} verifications, {args.workers} workers, batches of {args.batch}")
            print(f"  direct math-verify      : {n / t_direct:8.1f} /s  ({t_direct:.2f} s)")
            row = {"n": n, "direct_per_s": round(n / t_direct, 1)}
            for name in sides:
                res = best[f"{name}/{mix}"]
                print(
                    f"  {name:24}: {n / res['seconds']:8.1f} /s  ({res['seconds']:.2f} s, best of {args.rounds}; "
                    f"start-up {res['startup_s']:.2f} s apart; {res['fast']:.0%} fast path)"
                )
                row[name] = {"per_s": round(n / res["seconds"], 1), "fast": round(res["fast"], 3)}
            cur = best[f"current/{mix}"]
            if args.baseline:
                base = best[f"baseline {args.baseline}/{mix}"]
                ratio = base["seconds"] / cur["seconds"]
                changed = sum(a != b for a, b in zip(cur["correct"], base["correct"]))
                print(f"  current / baseline      : {ratio:8.2f}x   (verdicts that differ: {changed} of {n})")
                row["current_over_baseline"], row["verdicts_changed"] = round(ratio, 3), changed
            diff = sum(a != b for a, b in zip(cur["correct"], v_direct))
            print(
                f"  current / direct        : {t_direct / cur['seconds']:8.2f}x   (verdicts that differ: {diff} of {n})"
            )
            row["current_over_direct"] = round(t_direct / cur["seconds"], 3)
            report["mixes"][mix] = row
    return report


ATTACKS = {  # name -> (head, unit, tail): head + unit * k + tail, k chosen for the size
    "marker + spaces": ("Answer:", " ", ""),
    "marker + newlines + value": ("Answer:", "\n", "13"),
    "unclosed boxes": ("", "\\boxed{", "12"),
    "unclosed answer tags": ("", "<answer>", "12"),
    "nested boxes": ("", "\\boxed{", "12"),
    "answer sentences": ("", "The answer is ", "12"),
    "newlines + GSM8K marker": ("", "\n", "####"),
    "unclosed braces + box": ("", "{", "\\boxed{13}"),
    "commas in a box": ("\\boxed{12", ",", "13}"),
    "Chinese answer markers": ("", "答案：", "12"),
    "repeated boxes": ("", "\\boxed{12} ", ""),
    "dollar signs": ("", "$", "\\boxed{12}"),
    "long reasoning then a box": ("", "Step: 12 + 345 = 357, carry 1.\n", "\\boxed{12}"),
    # what stands around the final answer (rlvr.rewards.context): 64 bytes a unit, so 64 KB holds 1,000 boxes and 1,000 nots
    "boxes and nots": ("", "So $\\boxed{12}$, which is not 13 (or maybe it is, if we count). ", ""),
    "one box, a tail of hedges": ("$\\boxed{12}$", " It is not 13, or perhaps 14 if it counts;", ""),
    "operators around boxes": ("", "$-\\sqrt{\\boxed{12}}^{2}! = $ ", ""),
}


def attacks(sizes_kb: list[int]) -> dict:
    sys.path.insert(0, str(ROOT / "src"))
    from rlvr.records import Problem
    from rlvr.config.reward import MathConfig
    from rlvr.rewards.math_verifier import MathVerifier

    v = MathVerifier(MathConfig())
    problem = Problem(id="a", prompt="", answer="12")
    v.verify([problem], [r"\boxed{12}"])  # warm the caches of the code, not of the inputs
    report: dict = {}
    print(f"{'attack':28}" + "".join(f"{kb:>9} KB" for kb in sizes_kb) + "   verdict")
    for name, (head, unit, tail) in ATTACKS.items():
        row = {}
        for kb in sizes_kb:
            k = kb * 1000 // len(unit.encode())
            text = head + unit * k + tail + ("}" * k if name == "nested boxes" else "")
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                r = v.verify([problem], [text])[0]
                best = min(best, time.perf_counter() - t)
            row[f"{kb}KB_ms"] = round(best * 1000, 2)
        row["verdict"] = {"correct": r.components["correct"], "flag": r.info.get("flag"), "path": r.info.get("path")}
        report[name] = row
        print(
            f"{name:28}"
            + "".join(f"{row[f'{kb}KB_ms']:9.2f} ms" for kb in sizes_kb)
            + f"   {r.components['correct']:.0f} {r.info.get('flag')} ({r.info.get('path')})"
        )
    v.close()
    worst = max(row["200KB_ms"] for row in report.values())
    print(f"worst case at 200 KB: {worst:.2f} ms")
    return {"sizes_kb": sizes_kb, "attacks": report, "worst_200KB_ms": worst}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--group", type=int, default=8, help="G for the GRPO-shaped run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline", default=None, help="git revision to score the same cases with, side by side")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per side; the best time is kept")
    ap.add_argument("--attacks", action="store_true", help="time adversarial completions instead")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # one side's run, in its own interpreter
        runs = json.loads(args.child.read_text())
        print(
            json.dumps({mix: ours([tuple(c) for c in cases], args.workers, args.batch) for mix, cases in runs.items()})
        )
        return
    report = attacks([50, 64, 100, 200, 390]) if args.attacks else throughput(args)
    if args.json:
        old = json.loads(args.json.read_text()) if args.json.exists() else {}
        old["attacks" if args.attacks else "throughput"] = {
            "date": time.strftime("%Y-%m-%d"),
            "command": " ".join(sys.argv),
            **report,
        }
        args.json.write_text(json.dumps(old, indent=1) + "\n")


if __name__ == "__main__":
    main()
