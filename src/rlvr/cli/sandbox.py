"""`rlvr sandbox`: run one program in the code sandbox, or show what isolation is active.

    rlvr sandbox run prog.py [--stdin input.txt] [--timeout 5]   # JSON verdict on stdout
    rlvr sandbox check                                           # isolation report; exit 1 if lacking

Both take the run configuration: `--config FILE` and dotted overrides right after
the file, e.g. `rlvr sandbox run prog.py reward.code.memory_mb=256 --timeout 2`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlvr.cli._common import add_config_arguments, config_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    run = sub.add_parser(
        "run",
        help="run FILE.py in the sandbox and print a JSON verdict",
        description="Run one Python program in the sandbox, as a code reward would, and print "
        "{status: ok|timeout|memory|killed|error, exit_code, stdout, stderr, ...}.",
    )
    run.add_argument("file", metavar="FILE.py", help="the program")
    run.add_argument("--stdin", metavar="FILE", help="file fed to the program's standard input")
    run.add_argument(
        "--timeout", type=float, metavar="S", help="wall-clock limit in seconds (default reward.code.case_timeout_s)"
    )
    add_config_arguments(run)
    check = sub.add_parser("check", help="print which isolation protections are active on this machine")
    add_config_arguments(check)


def run(args: argparse.Namespace) -> int:
    from rlvr.sandbox.executor import open_sandbox

    cfg = config_from_args(args).reward.code
    if args.action == "run":
        # Read inputs before starting anything, so a wrong path is reported as such.
        source = _read(args.file)
        stdin = _read(args.stdin) if args.stdin else ""
        if source is None or stdin is None:
            return 2
    sandbox = open_sandbox(cfg)
    report = sandbox.report
    assert report is not None
    if args.action == "check":
        print(report.text())
        return 0 if report.meets_requirements else 1
    if not report.meets_requirements and cfg.require_isolation:
        print(report.text(), file=sys.stderr)
        return 2
    timeout = args.timeout or cfg.case_timeout_s
    execution = sandbox.execute(
        "program", source, [{"stdin": stdin}], case_timeout_s=timeout, total_timeout_s=timeout + 1.0
    )
    if not execution.ok:
        verdict = {"status": "error", "reason": "sandbox_failure", "error": execution.error}
    else:
        case = execution.cases[0]
        verdict = {
            k: case.get(k)
            for k in ("status", "reason", "exit_code", "signal", "time_s", "cpu_s", "stdout", "stderr", "truncated")
        }
    verdict["isolation"] = report.plan
    print(json.dumps(verdict, indent=2))
    return 0 if verdict["status"] == "ok" else 1


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        print(f"rlvr sandbox: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return None
