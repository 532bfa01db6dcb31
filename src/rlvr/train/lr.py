"""Learning-rate schedules: a multiplier of the base rate per optimizer-schedule step."""

from __future__ import annotations

import math
from typing import Literal

Schedule = Literal["constant", "linear", "cosine"]


def lr_factor(
    step: int, *, total: int, warmup: int = 0, schedule: Schedule = "constant", min_ratio: float = 0.0
) -> float:
    """Multiplier of the base learning rate after `step` scheduler steps (0-based).

    Linear warmup from 1/warmup to 1 over the first `warmup` steps, then `schedule` from 1 down to
    `min_ratio` at `total`: 'constant' stays at 1, 'linear' and 'cosine' decay (the latter as
    0.5 * (1 + cos(pi * t))), t being the fraction of the steps after warmup that are done.
    """
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    decay = 1.0 - t if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * t))
    return min_ratio + (1.0 - min_ratio) * decay
