"""A GEMM for a decode step's few rows: x (M, K) @ W^T + b at M <= ROWS, over weights packed once.

At 16 rows a decode step is a stream of the weights (540 MB for SmolLM2-135M), and MKL's GEMM,
packed or not, streamed them at 16 GB/s on the 2-core Xeon where a read of the same bytes ran at
33 GB/s: its blocking is made for many rows. `skinny_gemm.c` keeps all of a step's rows (up to
16 at AVX-512, 12 at AVX2) in registers while one panel of the packed weight streams past, once
(bench/bench_decode_rows.py: a step's 121 products 27 ms instead of 34 at 16 rows). Its packed
weight is the weight's own size; MKL's is 3.7x (2 GB of fresh memory per decode for SmolLM2).
Every output is one chain of fused multiply-adds over k in order, so the AVX2 and AVX-512 builds
give the same numbers (tests/test_rollout_skinny.py). Past 16 rows MKL's packed GEMM is faster:
the stepper uses this only for decodes of at most ROWS rows.

The C source is compiled on first use with the machine's C compiler (`cc`, OpenMP; 1 s) into
$RLVR_KERNEL_CACHE or ~/.cache/rlvr/kernels, named by the source, flags and compiler, and loaded
with ctypes; its OpenMP is the runtime torch loaded, its threads torch's count. Where it cannot be
built (no compiler, no AVX2+FMA) `library()` is None, logged once, and the stepper uses MKL.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from rlvr.kernels import has_flag

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("skinny_gemm.c")
ROWS = 16
"""The most rows a decode may start with to use this GEMM (MKL's packed GEMM is faster past it)."""


def isa_flags(cpuinfo: str | None = None) -> list[str] | None:
    """Compiler flags for this CPU's widest build (AVX-512 or AVX2, with FMA), None without AVX2+FMA."""
    if not (has_flag("avx2", cpuinfo) and has_flag("fma", cpuinfo)):
        return None
    return ["-mavx2", "-mfma", *(["-mavx512f"] if has_flag("avx512f", cpuinfo) else [])]


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlvr" / "kernels"
    return Path(os.environ.get("RLVR_KERNEL_CACHE") or default)


def build(flags: list[str], out_dir: Path | None = None) -> Path:
    """Compile skinny_gemm.c with `flags` (once per source, flags and compiler); the shared library."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        raise FileNotFoundError("no C compiler (cc) on PATH")
    cmd = [compiler, "-O3", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=fast", *flags]
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), *cmd[1:], version]).encode()).hexdigest()[:16]
    out_dir = out_dir or cache_dir()
    path = out_dir / f"skinny_gemm-{key}.so"
    if not path.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:  # built aside, then renamed: processes may race
            subprocess.run([*cmd, str(SOURCE), "-o", f"{tmp}/lib.so"], check=True, capture_output=True, text=True)
            os.replace(f"{tmp}/lib.so", path)
    return path


def load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))  # (torch is imported: its libgomp.so.1 serves the library's OpenMP)
    ptr, i = ctypes.c_void_p, ctypes.c_int
    lib.rlvr_skinny_panel_width.restype = i
    lib.rlvr_skinny_pack.argtypes = [ptr, i, i, ptr, i]
    lib.rlvr_skinny_linear.argtypes = [ptr, i, i, ptr, i, ptr, ptr, i]
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled GEMM for this machine, or None where it cannot be built (logged once)."""
    flags = isa_flags()
    if flags is None:
        log.info("skinny GEMM: this CPU has no AVX2+FMA; the loop engine uses MKL's packed GEMM")
        return None
    try:
        return load(build(flags))
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        log.warning("skinny GEMM could not be built (%s); the loop engine uses MKL's packed GEMM", str(detail)[:500])
        return None


class SkinnyWeight:
    """A weight (N, K) and optional bias (N,), fp32, packed for `lib`; called on x (M, K) -> (M, N)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, lib: ctypes.CDLL) -> None:
        self.lib, (self.n, self.k) = lib, weight.shape
        width = lib.rlvr_skinny_panel_width()
        weight = weight.detach().contiguous()
        self.packed = torch.empty(-(-self.n // width) * self.k * width, dtype=torch.float32)
        lib.rlvr_skinny_pack(weight.data_ptr(), self.n, self.k, self.packed.data_ptr(), torch.get_num_threads())
        self.bias = None if bias is None else bias.detach().float().contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = x.new_empty(len(x), self.n)
        self.lib.rlvr_skinny_linear(x.data_ptr(), len(x), self.k, self.packed.data_ptr(), self.n,
                                    None if self.bias is None else self.bias.data_ptr(), y.data_ptr(),
                                    torch.get_num_threads())
        return y
