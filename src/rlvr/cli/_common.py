"""Arguments shared by the commands that take a run configuration."""

from __future__ import annotations

import argparse

from rlvr.config import Config, load_config


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML config file (presets in configs/)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, e.g. rollout.group_size=8 train.lr=1e-6")


def config_from_args(args: argparse.Namespace) -> Config:
    return load_config(args.config, args.overrides)
