"""The `rlvr` command: one entry point, one module per sub-command.

Each sub-command lives in `rlvr.cli.<name>` and exposes
`add_arguments(parser)` and `run(args) -> int`. Modules are imported only
when their command runs, so `rlvr reward` never pays for torch start-up (measured on 2 cores:
`rlvr --help` 0.06 s; importing the training, serving and Ray machinery 5.4-7.3 s): that is
why the commands import inside `run`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rlvr.configlib import ConfigError, RunFailed
from rlvr.kernels import start_as_rlvr

COMMANDS = {
    "train": "train a policy with GRPO (runs cold-start SFT first when needed)",
    "sft": "cold-start supervised fine-tuning on worked examples",
    "eval": "evaluate a model on data files: greedy accuracy, pass@k, maj@k, avg@k per source",
    "compare": "is model B better than A? paired results, bootstrap interval, McNemar test, a verdict",
    "reward": "score completions with the rule-based rewards",
    "rm": "train a reward model on preference pairs (Bradley-Terry)",
    "data": "check a training data file before spending compute on it",
    "sandbox": "run a program in the code sandbox and print the verdict",
    "report": "write report.html for a run directory",
    "sweep": "a grid of runs over config values on Ray Tune, compared at the end",
    "plan": "memory per pool, step time and the GPU split a run needs, before it starts",
    "check": "go-live check: run the acceptance list against the configured setup",
    "serve": "serve a model behind OpenAI- and Anthropic-style APIs (streaming, API keys, /metrics, online A/B)",
}


def main(argv: list[str] | None = None) -> int:
    start_as_rlvr()  # before torch loads: the same numbers on every AVX2 machine, large tensors on 2 MB pages
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
    args, extra = parser.parse_known_args(argv)
    # key=value overrides after options (`rlvr eval MODEL --data F seed=1`): argparse stops filling
    # a positional list once an option follows it
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args._run(args) or 0)
    except ConfigError as exc:
        print(f"rlvr {args.command}: config error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        print(f"rlvr {args.command}: failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
