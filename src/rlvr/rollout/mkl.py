"""MKL's packed GEMM, called in torch's own MKL: a weight packed into a buffer it keeps.

    packed = mkl.PackedWeight(n, k)      # MKL's buffer for an (N, K) fp32 weight
    packed.pack(weight)                  # (again after every change: in place)
    y = packed(x)                        # x (M, K) @ weight^T, any M
    packed(x, out=h)                     # h += x @ weight^T

torch offers the same GEMM as torch.ops.mkl._mkl_reorder_linear_weight and _mkl_linear, but the
reorder allocates a new buffer at every call (MKL's bound on the packed size: 1.3-9x the weight's
bytes), so packing the weights again after an optimizer step faulted in fresh memory: 0.8-1.8 s
for SmolLM2 over the first decodes of a process, 0.1 s once the heap held enough freed memory.
Here the buffer is a plain tensor made once per weight and packed again in place
(cblas_sgemm_pack), and the product (cblas_sgemm_compute) adds into an output where asked (beta 1:
the residual sum in the same pass). The calls are those torch makes (aten's mkldnn/Linear.cpp:
row-major, B packed transposed, for ROWS rows), into the MKL torch links and sets the threads of.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path

import torch

log = logging.getLogger(__name__)

ROWS = 128
"""The rows MKL packs for (torch's batch_size): a weight packed for 128 serves 1 to 800 rows as fast as
one packed for that count (packed for 16, 64 rows and more ran slower than unpacked)."""

ROW_MAJOR, NO_TRANS, TRANS, PACKED, B_MATRIX = 101, 111, 112, 151, 162  # MKL's CBLAS enum values


@functools.cache
def library() -> ctypes.CDLL | None:
    """torch's library with MKL's packed GEMM in it, where its product equals torch's (checked once on
    small products at several row counts), else None."""
    if not torch.backends.mkl.is_available():
        return None
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        pack, compute, size = lib.cblas_sgemm_pack, lib.cblas_sgemm_compute, lib.cblas_sgemm_pack_get_size
    except (OSError, AttributeError):
        return None
    i, f, ptr = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    size.restype, size.argtypes = ctypes.c_size_t, [i, i, i, i]
    pack.restype, pack.argtypes = None, [i, i, i, i, i, i, f, ptr, i, ptr]
    compute.restype, compute.argtypes = None, [i, i, i, i, i, i, ptr, i, ptr, i, f, ptr, i]
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(40, 24, generator=gen), torch.randn(200, 24, generator=gen)
    packed = PackedWeight(40, 24, lib)
    packed.pack(w)
    agrees = all(torch.allclose(packed(x[:m]), x[:m] @ w.T, atol=1e-5) for m in (1, 3, 16, 200))
    if not agrees:
        log.warning("MKL's packed GEMM in %s disagrees with torch's product: not used", lib._name)
    return lib if agrees else None


class PackedWeight:
    """MKL's packing of an (N, K) fp32 weight, in a buffer kept for repacking; called on x (M, K)."""

    def __init__(self, n: int, k: int, lib: ctypes.CDLL | None = None) -> None:
        self.lib, self.n, self.k = lib or library(), n, k
        self.buffer = torch.empty(self.lib.cblas_sgemm_pack_get_size(B_MATRIX, ROWS, n, k) // 4 + 1)

    def pack(self, weight: torch.Tensor) -> None:
        """Pack `weight` (N, K) into the buffer (in place: the buffer's memory serves again)."""
        if weight.shape != (self.n, self.k) or weight.dtype != torch.float32 or not weight.is_contiguous():
            raise ValueError(f"PackedWeight({self.n}, {self.k}): weight {tuple(weight.shape)} {weight.dtype}")
        self.lib.cblas_sgemm_pack(
            ROW_MAJOR, B_MATRIX, TRANS, ROWS, self.n, self.k, 1.0, weight.data_ptr(), self.k, self.buffer.data_ptr()
        )

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x (M, K) contiguous fp32 @ weight^T -> (M, N); added into `out` (M, N) where given (returned)."""
        m = len(x)
        if not x.is_contiguous() or x.shape[1:] != (self.k,) or x.dtype != torch.float32:
            raise ValueError(f"PackedWeight({self.n}, {self.k}): input {tuple(x.shape)} {x.dtype}, contiguous")
        if out is not None and (out.shape != (m, self.n) or not out.is_contiguous()):
            raise ValueError(f"PackedWeight({self.n}, {self.k}): output {tuple(out.shape)}, ({m}, {self.n}) contiguous")
        y = x.new_empty(m, self.n) if out is None else out
        if m:
            self.lib.cblas_sgemm_compute(
                ROW_MAJOR,
                NO_TRANS,
                PACKED,
                m,
                self.n,
                self.k,
                x.data_ptr(),
                self.k,
                self.buffer.data_ptr(),
                self.k,
                0.0 if out is None else 1.0,
                y.data_ptr(),
                self.n,
            )
        return y
