"""Weight sync: the trainer publishes versioned weights, rollout workers load them before sampling.

The transport is named in the handle so a worker can dispatch on it: 'object_store' (CPU state
dict in Ray's object store, works everywhere) is the one implemented; a GPU path (NCCL broadcast
or CUDA IPC handles) adds a transport here without changing the callers: `publish` on the
trainer, `WeightHandle` through the call, `load_published` on the worker into its engine's
`load_weights`, checked against the trainer's checksum (rlvr.rollout.sync).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray

from rlvr.deploy.ray.replies import WeightsLoaded
from rlvr.rollout.sync import SyncMeter, checksum


OFFERS = "offers"
"""The rollout workers' Ray concurrency group for publications offered under partial rollouts
(RolloutWorker.offer, beside the sample call in flight)."""


@dataclass(frozen=True)
class WeightHandle:
    version: int
    """Updates applied to the policy these weights belong to (Completion.policy_version)."""
    refs: list[Any] = field(default_factory=list)
    """Object refs of the payload, one per tensor, inside a list so Ray does not fetch them when the
    worker already holds this version (top-level ObjectRef arguments are always resolved)."""
    names: tuple[str, ...] = ()
    """The parameter name of each ref."""
    transport: str = "object_store"
    publication: str = ""
    """Which publication this is: its publisher's id and count. After a rollback the same version
    number comes again with other weights, so workers compare publications, never versions; a
    restarted trainer's publisher is a new one, so its first publication is never taken for the
    dead trainer's first (the workers, not restarted, hold that one)."""
    checksum: int = 0
    """rlvr.rollout.sync's checksum of the weights as published (each tensor as it is, tied ones once)."""
    tied: frozenset[str] = frozenset()
    """Names that share another's storage in the trainer's model (left out of checksums)."""
    bytes: int = 0

    def supersedes(self, publication: str | None) -> bool:
        """Whether this is a later publication than `publication` (a handle's) by the same publisher
        (None: any is). A rollback's publication supersedes the ones before it; another publisher's
        (a restarted trainer's) never does: the calls it makes name its own."""
        if publication is None:
            return True
        mine, theirs = self.publication.rpartition("/"), publication.rpartition("/")
        return bool(mine[0]) and mine[0] == theirs[0] and int(mine[2]) > int(theirs[2])


class WeightPublisher:
    """Trainer side. Keeps the latest version's payload alive until the next publication."""

    def __init__(self) -> None:
        self.handle: WeightHandle | None = None
        self.publications = 0
        self.id = uuid.uuid4().hex[:12]

    @property
    def version(self) -> int | None:
        return None if self.handle is None else self.handle.version

    def publish(self, named_tensors, version: int, tied: frozenset[str] = frozenset()) -> WeightHandle:
        """Put a CPU copy of the weights ((parameter name, tensor) pairs) in the object store as
        `version`, one object per tensor as they come: the trainer holds one tensor's copy at a time,
        so weights gathered from shards one tensor at a time are never whole in its memory."""
        names, refs = [], []
        meter = SyncMeter(skip=tied)
        for name, tensor in meter.count(named_tensors):
            names.append(name)
            refs.append(ray.put(tensor.detach().to("cpu", copy=True)))
        self.publications += 1
        self.handle = WeightHandle(
            version,
            refs,
            tuple(names),
            publication=f"{self.id}/{self.publications}",
            checksum=meter.checksum,
            tied=tied,
            bytes=meter.bytes,
        )
        return self.handle


def fetch_weights(handle: WeightHandle) -> dict:
    """Worker side: the published weights (parameter name -> tensor), for an engine's load_weights."""
    if handle.transport != "object_store":
        raise ValueError(
            f"weight transport {handle.transport!r} is unknown; this build ships 'object_store' "
            "(CPU); NCCL/CUDA-IPC transports plug in here"
        )
    return dict(zip(handle.names, ray.get(handle.refs), strict=True))


def load_published(engine, handle: WeightHandle, during_sampling: bool = False) -> WeightsLoaded:
    """Worker side: fetch the published weights into `engine` and check them twice: what arrived
    against the trainer's checksum, and what the engine holds after loading against what arrived
    (in the dtype it holds), for the trainer's sync metrics. during_sampling: taken between decode
    steps (partial rollouts)."""
    t0 = time.time()
    weights = fetch_weights(handle)
    engine.load_weights(weights.items(), handle.version)
    kept = [t for name, t in weights.items() if name not in handle.tied]
    ok = checksum(kept) == handle.checksum and engine.weights_checksum() == checksum(kept, engine.sync_dtype)
    return WeightsLoaded(load_s=time.time() - t0, checksum_ok=ok, during_sampling=during_sampling)
