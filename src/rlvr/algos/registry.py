"""Names of the algorithm variants, and the one lookup every registry uses.

A config names a variant by string ("grpo", "token_mean", "k3", ...); the
str Enums below are the closed set of those names, and each module keeps a
dict from Enum member to the one function that implements it. Call sites
look a function up once and call it -- no `if loss_type == ...` chains.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from typing import TypeVar

__all__ = [
    "AdvantageEstimator",
    "AdvantageScale",
    "KLEstimator",
    "LossType",
    "RatioLevel",
    "RolloutIS",
    "choose",
    "lookup",
]


class AdvantageEstimator(str, Enum):
    GRPO = "grpo"  # baseline = group mean
    RLOO = "rloo"  # baseline = mean of the other G-1 rewards of the group


class AdvantageScale(str, Enum):
    GROUP = "group"  # divide by the group's std (GRPO)
    BATCH = "batch"  # divide by the std of all rewards in the batch
    NONE = "none"  # no division (Dr. GRPO; verl's RLOO)


class LossType(str, Enum):
    GRPO = "grpo"  # token mean per sequence, then mean over sequences
    TOKEN_MEAN = "token_mean"  # DAPO / BNPO: mean over every token of the batch
    DR_GRPO = "dr_grpo"  # sum over tokens / (sequences x max length)


class KLEstimator(str, Enum):
    K1 = "k1"  # log(p/q): unbiased, high variance, can be negative per token
    K2 = "k2"  # 0.5 log(p/q)^2: biased, always >= 0
    K3 = "k3"  # q/p - 1 - log(q/p): unbiased, always >= 0 (Schulman; GRPO paper)


class RatioLevel(str, Enum):
    TOKEN = "token"  # PPO / GRPO: one importance ratio per token
    SEQUENCE = "sequence"  # GSPO: geometric mean of the token ratios of a sequence


class RolloutIS(str, Enum):
    NONE = "none"  # no correction: the engine's log-probs are taken as the trainer's
    TOKEN = "token"  # per-token weight trainer/engine, truncated (TIS)
    SEQUENCE = "sequence"  # one weight per sequence: the product of its token ratios, truncated


E = TypeVar("E", bound=Enum)
F = TypeVar("F", bound=Callable)


def choose(enum_cls: type[E], name: str | E, what: str) -> E:
    """The Enum member for `name` (a member or its string value), or a ValueError that lists the choices."""
    if isinstance(name, enum_cls):
        return name
    try:
        return enum_cls(name)
    except ValueError:
        options = ", ".join(repr(m.value) for m in enum_cls)
        raise ValueError(f"unknown {what} {name!r}; choose one of: {options}") from None


def lookup(registry: Mapping[E, F], enum_cls: type[E], name: str | E, what: str) -> F:
    """The registered function for `name`; `what` names the setting in the error (e.g. 'algo.loss_type')."""
    return registry[choose(enum_cls, name, what)]
