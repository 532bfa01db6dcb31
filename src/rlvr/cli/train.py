"""`rlvr train`: GRPO on the configured task (cold-start SFT first when needed)."""

from __future__ import annotations

from rlvr.cli._common import add_config_arguments, config_from_args


def add_arguments(parser) -> None:
    add_config_arguments(parser)


def run(args) -> int:
    cfg = config_from_args(args)  # validated before anything heavy is imported
    if cfg.deploy.backend == "ray":  # the same modules as Ray actors (Ray imported only here)
        from rlvr.deploy.ray.driver import run as train
    else:
        from rlvr.train.grpo import train

    summary = train(cfg)
    return 0 if summary["status"] == "completed" else 1
