"""The trainer's side of a weight sync: load the policy's weights into a rollout engine, measured
(bytes, seconds, method) and checked (rlvr.rollout.sync's checksum of what the engine holds)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rlvr.rollout import RolloutEngine
from rlvr.rollout.engine import WeightSyncError
from rlvr.rollout.sync import SyncMeter, tied_names
from rlvr.train.parallel import Parallel


@dataclass(frozen=True)
class Synced:
    """What one weight sync cost and whether it arrived (rlvr.rollout.sync)."""

    seconds: float
    bytes: int
    method: str
    """The engine's sync_method: 'shared', 'copy', 'vllm_reload', 'object_store'."""
    mismatch: int = 0
    """Engines whose weights' checksum differs from the trainer's (a critical alert: rollback)."""

    def add_to(self, metrics: dict) -> None:
        """Add this sync's figures to a step's metrics (summed with a sync already there: an
        evaluation engine's and the rollout engine's)."""
        for key, value in (
            ("sync/seconds", self.seconds),
            ("sync/bytes", float(self.bytes)),
            ("sync/checksum_mismatch", float(self.mismatch)),
        ):
            metrics[key] = metrics.get(key, 0.0) + value
        metrics.setdefault("sync/method", self.method)


def sync_weights(
    engine: RolloutEngine, model, version: int, step: int, par: Parallel | None = None, *, force: bool = False
) -> Synced | None:
    """Load `model`'s weights into `engine` as policy `version` unless it holds them (force: whatever
    version it says it holds: after a rollback a number comes again with other weights); None when
    nothing was loaded. A sharded model's weights are gathered one tensor at a time on their way
    (every rank syncs). The checksum of what went is compared with what the engine holds after it
    ('shared' tensors are the trainer's own: nothing to compare). A failed or timed-out load raises
    naming the step."""
    if engine.version == version and not force:
        return None
    t0 = time.time()
    meter = SyncMeter(engine.sync_dtype, tied_names(model))
    try:
        engine.load_weights(meter.count((par or Parallel()).full_weights(model)), version)
    except Exception as exc:
        raise WeightSyncError(f"step {step}: {exc}") from exc
    seconds = time.time() - t0
    if engine.sync_method == "shared":
        return Synced(seconds, 0, "shared")
    return Synced(seconds, meter.bytes, engine.sync_method, int(engine.weights_checksum() != meter.checksum))
