"""`rlvr check`: run the go-live acceptance list against the configured setup; exit 1 if a line fails."""

from __future__ import annotations

from pathlib import Path

from rlvr.cli._common import add_config_arguments, config_from_args


def add_arguments(parser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")


def run(args) -> int:
    cfg = config_from_args(args)
    from rich.markup import escape
    from rich.table import Table

    from rlvr.console import RunConsole
    from rlvr.cli.golive import as_json, run_checks

    ui = RunConsole(cfg.run.progress)
    lines = run_checks(cfg, ui)
    table = Table(title=f"rlvr check: {cfg.model.name} / {cfg.task.name}")
    for column in ("check", "result", "measured", "detail"):
        table.add_column(column)
    for line in lines:
        table.add_row(
            line.name, "[green]pass[/]" if line.ok else "[bold red]FAIL[/]", escape(line.figure), escape(line.detail)
        )
    ui.console.print(table)
    if args.json:
        Path(args.json).write_text(as_json(lines) + "\n")
    failed = [line.name for line in lines if not line.ok]
    ui.console.print(
        f"{len(lines) - len(failed)}/{len(lines)} checks pass" + (f"; failing: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0
