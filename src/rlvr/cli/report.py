"""`rlvr report RUN_DIR`: write report.html (one self-contained page) and PNG plots for a run."""

from __future__ import annotations

import sys
from pathlib import Path


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (runs/<name>), finished or not")
    parser.add_argument("--out", metavar="FILE", help="where to write the page (default RUN_DIR/report.html)")


def run(args) -> int:
    from rlvr.ops.report import write_report

    try:
        path = write_report(Path(args.run_dir), Path(args.out) if args.out else None)
    except FileNotFoundError as exc:
        print(f"rlvr report: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} (plots in {Path(args.run_dir) / 'report'})")
    return 0
