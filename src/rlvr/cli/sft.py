"""`rlvr sft`: cold-start supervised fine-tuning on worked examples.

The built-in task's teacher writes them; with `--data FILE` (or data.files) they are the records'
worked solutions: a `solution` field, or chat `messages` ending with an assistant turn. Records
without one are counted and reported; held-out records (data.eval_size) are never trained on.
`rlvr train` with the same configuration then starts RL from the checkpoint (it is cached), or
from any directory with model.init_from=DIR.
"""

from __future__ import annotations

import argparse
import json

from rlvr.cli._common import add_config_arguments, config_from_args


def add_arguments(parser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--data",
        metavar="FILE",
        action="append",
        default=[],
        help="a data file or directory with worked solutions (JSONL, Parquet, datasets); repeatable; sets data.files",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="where to save the checkpoint (default: the SFT cache, which "
        "`rlvr train` with the same configuration finds)",
    )
    add_config_arguments(parser)


def run(args) -> int:
    if args.data:
        args.overrides = [*args.overrides, f"data.files={json.dumps([str(p) for p in args.data])}"]
    cfg = config_from_args(args)
    from rlvr.assembly import run_sft
    from rlvr.train.sft import describe, sft_info

    def on_step(step: int, loss: float) -> None:
        if step % 50 == 0 or step == cfg.sft.steps - 1:
            print(f"sft step {step + 1}/{cfg.sft.steps}  loss {loss:.4f}", flush=True)

    path = run_sft(cfg, out_dir=args.out, on_step=on_step)
    if path is None:
        print(
            "rlvr sft: no training record carries a worked solution (a `solution` field, or chat messages "
            "ending with an assistant turn): nothing to learn from"
        )
        return 1
    info = sft_info(path) or {}
    if "examples" in info:
        print(f"cold start on {describe(info)}")
    print(f"SFT checkpoint: {path}")
    if args.out:
        print(f"start RL from it: rlvr train ... model.init_from={path}")
    return 0
