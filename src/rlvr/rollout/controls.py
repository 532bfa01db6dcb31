"""Controls some rollout engines have beside `RolloutEngine`'s generate and load_weights.

A caller asks with isinstance (the protocols are runtime-checkable), never getattr:

    if isinstance(engine, Sleeper) and engine.sleep_level:
        engine.sleep()
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@runtime_checkable
class Bounded(Protocol):
    """An engine whose model has a fixed number of positions (the in-process engines, vLLM)."""

    @property
    def max_context(self) -> int | None:
        """Positions the model has (prompt + trajectory); episodes end before they run past them."""
        ...


@runtime_checkable
class Speculative(Protocol):
    """An engine that can decode speculatively (rollout.speculative: loop's prompt lookup, vLLM's methods)."""

    speculative_stats: dict[str, float]
    """Draft acceptance of the last generate call: accept_rate, accept_len ({} when it drafted nothing)."""

    def without_speculation(self) -> None:
        """Plain decoding from the next call on: the trainer's fallback when acceptance stays low."""
        ...


@runtime_checkable
class Sleeper(Protocol):
    """An engine that frees its accelerator memory between generate calls (rollout.vllm.sleep_level)."""

    sleep_level: int
    """0: never sleeps; 1: offloads its weights; 2: drops them (reloaded with the next weights)."""

    def sleep(self) -> None:
        """Free the memory now; the next generate wakes it."""
        ...


@dataclass(frozen=True)
class NewWeights:
    """Partial rollouts (deploy.partial_rollouts): weights published while an engine samples.

    Once `arrived` is set, the in-process engines stop decoding at their next step and return what
    each unfinished row sampled so far, finish reason 'interrupted'; the episodes take the weights
    (`take` loads them: the engine's version advances and `arrived` clears) and sample those rows on
    from where they stopped (rlvr.rollout.episodes)."""

    arrived: threading.Event
    take: Callable[[], None]
