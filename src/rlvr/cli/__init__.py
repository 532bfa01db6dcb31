"""The `rlvr` command: one entry point, one module per sub-command.

Each sub-command lives in `rlvr.cli.<name>` and exposes
`add_arguments(parser)` and `run(args) -> int`. Modules are imported only
when their command runs, so `rlvr reward` never pays for torch start-up.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rlvr.configlib import ConfigError

COMMANDS = {
    "train": "train a policy with GRPO (runs cold-start SFT first when needed)",
    "sft": "cold-start supervised fine-tuning on worked examples",
    "eval": "greedy held-out accuracy of a model",
    "reward": "score completions with the rule-based rewards",
    "data": "check a training data file before spending compute on it",
    "sandbox": "run a program in the code sandbox and print the verdict",
    "report": "write report.html for a run directory",
    "check": "go-live check: run the acceptance list against the configured setup",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="rlvr", description="Reinforcement learning from verifiable rewards.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    name = argv[0] if argv and argv[0] in COMMANDS else None
    for cmd, help_text in COMMANDS.items():
        p = sub.add_parser(cmd, help=help_text, description=help_text)
        if cmd == name:
            module = importlib.import_module(f"rlvr.cli.{cmd}")
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except ConfigError as exc:
        print(f"rlvr {args.command}: config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
