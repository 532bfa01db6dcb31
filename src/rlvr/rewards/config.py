"""Configuration of the reward module (section `reward`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RewardConfig:
    weights: dict[str, float] = field(default_factory=lambda: {"format": 0.1, "correct": 1.0})
    """Component name -> weight in the total. Format small, outcome dominant."""
