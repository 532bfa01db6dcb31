"""`rlvr train`: GRPO on the configured task (cold-start SFT first when needed).

With train.strategy=fsdp and no launcher around it (no RANK in the environment), `rlvr train`
is its own launcher: it starts train.world_size ranks of itself on this machine with torchrun's
machinery (`torch.distributed.run`, standalone rendezvous on a free local port), and exits
with their status; a rank that dies takes the others down with it.
"""

from __future__ import annotations

import os

from rlvr.cli._common import add_config_arguments, config_argv, config_from_args
from rlvr.configlib import ConfigError


def add_arguments(parser) -> None:
    add_config_arguments(parser)


def run(args) -> int:
    cfg = config_from_args(args)  # validated before anything heavy is imported
    if cfg.train.strategy == "fsdp" and "RANK" not in os.environ:
        return launch(cfg, ["train", *config_argv(args), *args.overrides])
    if cfg.deploy.backend == "ray":  # the same modules as Ray actors (Ray imported only here)
        from rlvr.assembly.on_ray import train_on_ray as train
    else:
        from rlvr.assembly import train

    summary = train(cfg)
    return 0 if summary["status"] == "completed" else 1


def launch(cfg, argv: list[str]) -> int:
    """Start the ranks of `rlvr <argv>` on this machine: train.world_size, or one per GPU."""
    import torch
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    from rlvr.train.parallel import train_device

    ranks = cfg.train.world_size
    if not ranks and train_device(cfg.train.device).type == "cuda":
        ranks = torch.cuda.device_count()
    if not ranks:
        raise ConfigError(
            "train.strategy=fsdp: set train.world_size to the number of ranks to start "
            "(on the CPU there is no device count to default to)"
        )
    if train_device(cfg.train.device).type == "cuda" and ranks > torch.cuda.device_count():
        raise ConfigError(
            f"train.world_size={ranks}: this machine has {torch.cuda.device_count()} CUDA device(s), "
            "one rank per device"
        )
    launcher = get_args_parser().parse_args(
        ["--standalone", f"--nproc-per-node={ranks}", "--module", "rlvr.cli", *argv]
    )
    try:
        torchrun(launcher)
    except ChildFailedError as exc:
        failures = "; ".join(f"rank {r}: exit code {f.exitcode}" for r, f in sorted(exc.failures.items()))
        print(f"rlvr train: {failures} (the run directory's events.jsonl and ranks/ say more)")
        return 1
    return 0
