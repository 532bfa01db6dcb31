"""What a weight sync moved, and whether it arrived: bytes, seconds, method, and a checksum of the
weights on both sides.

    meter = SyncMeter(engine.sync_dtype)
    engine.load_weights(meter.count(named_tensors), version)   # the trainer's side, as the tensors pass
    mismatch = meter.checksum != engine.weights_checksum()     # the engine's side, read back

The checksum is the sum of every element's bit pattern (an integer of the element's width) over all
tensors, modulo 2**64. It does not depend on the order of the tensors nor on how an engine lays them
out (vLLM's fused q/k/v projection sums as its three parts; padding rows are zeros), so the trainer's
weights and an engine's compare whatever names the engine gives them. Any changed value changes it;
values moved from one place to another do not. Tensors are summed in the dtype the engine holds them
in (`sync_dtype`: a bfloat16 engine fed float32 weights holds their rounding), and each tensor once
(`tied`: a name that shares another's storage, as lm_head does the embedding when tied, is left out
on both sides).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
MOD = 2**64


def tensor_checksum(tensor: torch.Tensor, dtype: torch.dtype | None = None) -> int:
    """One tensor's share of the checksum, its values first cast to `dtype` (None: as they are)."""
    t = tensor.detach()
    if dtype is not None and t.is_floating_point() and t.dtype != dtype:
        t = t.to(dtype)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    bits = t.contiguous().view(_INT_OF_WIDTH[t.element_size()])
    return int(bits.sum(dtype=torch.int64)) % MOD


def checksum(tensors: Iterable[torch.Tensor], dtype: torch.dtype | None = None) -> int:
    return sum(tensor_checksum(t, dtype) for t in tensors) % MOD


def tied_names(model: torch.nn.Module | None) -> frozenset[str]:
    """Names of parameters that are another's (tied weights: lm_head and the embedding, when tied),
    from the module structure alone (no tensor is read: safe on a sharded model)."""
    if model is None:
        return frozenset()
    unique = {name for name, _ in model.named_parameters()}
    return frozenset(name for name, _ in model.named_parameters(remove_duplicate=False) if name not in unique)


class SyncMeter:
    """Counts the bytes and the checksum of (name, tensor) pairs as they go to an engine."""

    def __init__(self, dtype: torch.dtype | None = None, skip: frozenset[str] = frozenset()) -> None:
        self.dtype, self.skip = dtype, skip
        self.bytes = 0
        self.tensors = 0
        self.checksum = 0

    def count(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in named_tensors:
            self.bytes += tensor.numel() * tensor.element_size()
            self.tensors += 1
            if name not in self.skip:
                self.checksum = (self.checksum + tensor_checksum(tensor, self.dtype)) % MOD
            yield name, tensor
