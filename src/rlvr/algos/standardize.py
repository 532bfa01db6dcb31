"""Scores standardised within groups, torch-free: reward components before they are weighted
(reward.normalize=group, rlvr.rewards.compose) and reward-model scores over a batch
(reward.models.<name>.normalize=batch, rlvr.inference.reward_models).

These divide by the population std (the spread of the group as it is); the advantages divide by the
Bessel-corrected std, as TRL and verl do (rlvr.algos.advantages). Two conventions, kept: one would
change the figures of every run that standardises its components (the game and robot presets).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence

__all__ = ["standardize"]


def standardize(
    values: Sequence[float], groups: Sequence[Hashable], valid: Sequence[bool], eps: float = 1e-6
) -> list[float]:
    """Each value standardised within its group over the group's valid members: (v - mean) / (std + eps),
    with the population std, in float64. A group whose std is below eps carries no signal: all 0; so
    does every invalid member."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, (g, ok) in enumerate(zip(groups, valid)):
        if ok:
            members[g].append(i)
    out = [0.0] * len(values)
    for idx in members.values():
        vs = [values[i] for i in idx]
        mean = sum(vs) / len(vs)
        std = math.sqrt(sum((v - mean) ** 2 for v in vs) / len(vs))
        for i in idx:
            out[i] = 0.0 if std < eps else (values[i] - mean) / (std + eps)
    return out
