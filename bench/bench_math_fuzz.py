"""The long profile of the math verifier's property-based fuzz suite (tests/math_fuzz.py).

    .venv/bin/python bench/bench_math_fuzz.py [--examples 100000] [--json bench/math_fuzz_results.json]

Runs every property of tests/math_fuzz.py with --examples split evenly between them
(random seeds, no example database), through one MathVerifier with the default config
(timeout_s 5), and reports per property: examples run, false positives or other
property failures (hypothesis stops a property at its first failure and shrinks it),
verdicts over the budget (timeouts), the slowest verify call, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from hypothesis import HealthCheck, given, settings  # noqa: E402

from math_fuzz import PROPERTIES  # noqa: E402
from rlvr.config.reward import MathConfig  # noqa: E402
from rlvr.rewards.math_verifier import MathVerifier  # noqa: E402


class Timed:
    """The verifier, counting calls, timeouts and the slowest call."""

    def __init__(self, verifier: MathVerifier) -> None:
        self.verifier, self.calls, self.timeouts, self.slowest = verifier, 0, 0, 0.0

    def verify(self, problems, texts):
        t = time.perf_counter()
        out = self.verifier.verify(problems, texts)
        self.slowest = max(self.slowest, time.perf_counter() - t)
        self.calls += len(out)
        self.timeouts += sum(bool(r.info.get("timeout")) for r in out)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=100_000)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    per = max(1, args.examples // len(PROPERTIES))
    verifier = MathVerifier(MathConfig())
    rows, start = [], time.perf_counter()
    for name, (check, strategy) in PROPERTIES.items():
        timed, failures, examples = Timed(verifier), [], [0]

        @settings(max_examples=per, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(strategy)
        def holds(case):
            examples[0] += 1
            message = check(timed, case)
            assert message is None, message

        t = time.perf_counter()
        try:
            holds()
        except AssertionError as exc:
            failures.append(str(exc).splitlines()[0][:300])
        row = {
            "property": name,
            "examples": examples[0],
            "verify_calls": timed.calls,
            "failures": failures,
            "timeouts": timed.timeouts,
            "slowest_call_s": round(timed.slowest, 3),
            "wall_s": round(time.perf_counter() - t, 1),
        }
        rows.append(row)
        print(
            f"{name:34} {row['examples']:7d} examples {row['verify_calls']:7d} calls  failures {len(failures)}  "
            f"timeouts {row['timeouts']}  slowest {row['slowest_call_s']:.3f} s  {row['wall_s']:.0f} s",
            flush=True,
        )
        for f in failures:
            print(f"    {f}")
    verifier.close()
    total = {
        "examples": sum(r["examples"] for r in rows),
        "verify_calls": sum(r["verify_calls"] for r in rows),
        "failures": sum(len(r["failures"]) for r in rows),
        "timeouts": sum(r["timeouts"] for r in rows),
        "slowest_call_s": max(r["slowest_call_s"] for r in rows),
        "wall_s": round(time.perf_counter() - start, 1),
    }
    print(f"total: {total}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "total": total, "properties": rows},
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
