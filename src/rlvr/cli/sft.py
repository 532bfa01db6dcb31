"""`rlvr sft`: cold-start supervised fine-tuning on worked examples."""

from __future__ import annotations

from rlvr.cli._common import add_config_arguments, config_from_args


def add_arguments(parser) -> None:
    parser.add_argument("--out", metavar="DIR", help="where to save the checkpoint (default: the SFT cache)")
    add_config_arguments(parser)


def run(args) -> int:
    cfg = config_from_args(args)
    from rlvr.train.sft import run_sft

    def on_step(step: int, loss: float) -> None:
        if step % 50 == 0 or step == cfg.sft.steps - 1:
            print(f"sft step {step + 1}/{cfg.sft.steps}  loss {loss:.4f}", flush=True)

    path = run_sft(cfg, out_dir=args.out, on_step=on_step)
    print(f"SFT checkpoint: {path}")
    return 0
