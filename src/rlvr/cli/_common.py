"""Arguments shared by the commands that take a run configuration."""

from __future__ import annotations

import argparse

from rlvr.config import Config, load_config
from rlvr.envs.settings import check_env


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_files(parser)
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. rollout.group_size=8 train.lr=1e-6"
    )


def add_config_files(parser: argparse.ArgumentParser, what: str = "") -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        action="append",
        default=[],
        help="YAML config file (presets in configs/); repeat to stack them, later files win" + what,
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        default=None,
        help="a profile: the files' `profiles: NAME` section or configs/profiles/NAME.yaml (default $RLVR_PROFILE)",
    )


def config_argv(args: argparse.Namespace) -> list[str]:
    """The --config/--profile arguments again (for a command that starts another)."""
    return [x for path in args.config for x in ("--config", str(path))] + (
        ["--profile", args.profile] if args.profile else []
    )


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """--device for the commands that run a model outside training (eval, compare, serve)."""
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default=None,
        help="where the model runs (= train.device; default auto: CUDA when visible)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    device = getattr(args, "device", None)
    overrides = [*args.overrides, f"train.device={device}"] if device else args.overrides
    cfg = load_config(args.config, overrides, profile=args.profile)
    check_env(cfg.env, cfg.task, cfg.algo, cfg.reward, cfg.sources)
    return cfg
