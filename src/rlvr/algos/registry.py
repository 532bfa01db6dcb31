"""Names of the algorithm variants, and the one lookup every registry uses.

A config names a variant by string ("grpo", "token_mean", "k3", ...); the
str Enums below are the closed set of those names, and each module keeps a
dict from Enum member to the one function that implements it (`registered`
refuses a dict that leaves a member out). Call sites look a function up once
and call it -- no `if loss_type == ...` chains.

The config's fields are these Enums (`rlvr.config.algo.AlgoConfig`), so a new
variant is its member here and its function in its module: the key's
validation, its error message and the reference docs follow from the member.
This module imports no torch: the config reads it.
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
    "Variant",
    "choose",
    "lookup",
    "registered",
]


class Variant(str, Enum):
    """A variant's name: compares, prints and formats as its string value (`f"{LossType.GRPO}"` is
    'grpo', as the config file wrote it)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class AdvantageEstimator(Variant):
    GRPO = "grpo"  # baseline = group mean
    RLOO = "rloo"  # baseline = mean of the other G-1 rewards of the group


class AdvantageScale(Variant):
    GROUP = "group"  # divide by the group's std (GRPO)
    BATCH = "batch"  # divide by the std of all rewards in the batch
    NONE = "none"  # no division (Dr. GRPO; verl's RLOO)


class LossType(Variant):
    GRPO = "grpo"  # token mean per sequence, then mean over sequences
    TOKEN_MEAN = "token_mean"  # DAPO / BNPO: mean over every token of the batch
    DR_GRPO = "dr_grpo"  # sum over tokens / (sequences x max length)


class KLEstimator(Variant):
    K1 = "k1"  # log(p/q): unbiased, high variance, can be negative per token
    K2 = "k2"  # 0.5 log(p/q)^2: biased, always >= 0
    K3 = "k3"  # q/p - 1 - log(q/p): unbiased, always >= 0 (Schulman; GRPO paper)


class RatioLevel(Variant):
    TOKEN = "token"  # PPO / GRPO: one importance ratio per token
    SEQUENCE = "sequence"  # GSPO: geometric mean of the token ratios of a sequence


class RolloutIS(Variant):
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


def registered(enum_cls: type[E], entries: dict[E, F]) -> dict[E, F]:
    """`entries` (member -> implementation), refused when a member of `enum_cls` has none: a new
    name without its function fails where the module is imported, not in the middle of a run."""
    missing = [m.value for m in enum_cls if m not in entries]
    if missing:
        raise TypeError(f"{enum_cls.__name__} names {missing} without an implementation in this registry")
    return entries
