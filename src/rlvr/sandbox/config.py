"""Configuration of code execution (section `reward.code`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CodeConfig:
    require_isolation: bool = True
    """Refuse to run code rewards when network/filesystem isolation cannot be set up."""
    max_parallel: int = 2
    """Sandboxed executions running at once."""
    timeout_s: float = 10.0
    """Wall-clock limit of one execution (all cases of one sample)."""
