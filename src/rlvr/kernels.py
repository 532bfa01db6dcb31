"""The same CPU arithmetic on every x86-64 machine with AVX2: ATen's, oneDNN's and MKL's kernels pinned.

torch on the CPU computes with whatever its libraries pick for the processor: ATen's vectorised
kernels (AVX2 or AVX-512), oneDNN's, and MKL's GEMM kernels (by instruction set and by vendor).
Each choice rounds differently, and 1,000 cold-start SFT steps amplify one ulp into another
checkpoint: the default run's seed 0 went 22.6% -> 78.0% on an AMD EPYC and 18.0% -> 35.6% on an
Intel Xeon with AVX-512. This pins all three before torch loads:

    ATEN_CPU_CAPABILITY=avx2   ATen's kernel dispatch
    ONEDNN_MAX_CPU_ISA=AVX2    oneDNN's
    MKL_CBWR=COMPATIBLE        MKL's: the one kernel set it runs alike on every vendor and ISA

MKL's other reproducibility modes do not reach across vendors: on an AMD CPU MKL ignores every
MKL_CBWR value but COMPATIBLE and runs its AMD path, and an Intel CPU's `AVX2,STRICT` still differs
from that path on small products (a 32x9x41 attention GEMM). With COMPATIBLE, 100 SFT steps give
bit-identical weights on an AMD EPYC and on the same CPU with MKL dispatching as on an Intel
AVX-512 host (bench/bench_arithmetic.py). The cost is MKL's fastest kernels (measured there). A
value already in the environment is kept, and RLVR_NATIVE_KERNELS=1 leaves all three alone.

`start_as_rlvr` makes these pins, asks torch's allocator for huge pages (`use_huge_pages`) and makes
glibc's malloc keep freed memory for reuse (`keep_freed_memory`), as the `rlvr` command does before
torch loads.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import MutableMapping

PINS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"}


def has_flag(flag: str, cpuinfo: str | None = None) -> bool:
    """Whether the CPU lists `flag` (/proc/cpuinfo; False where there is none)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return False
    return any(line.startswith("flags") and f" {flag}" in line for line in cpuinfo.splitlines())


def has_avx2(cpuinfo: str | None = None) -> bool:
    return has_flag("avx2", cpuinfo)


def pin_cpu_kernels(environ: MutableMapping[str, str] = os.environ, cpuinfo: str | None = None) -> dict[str, str]:
    """Set the pins that are not set yet (call before torch is imported); returns what it set."""
    if environ.get("RLVR_NATIVE_KERNELS") == "1" or platform.machine() not in ("x86_64", "AMD64"):
        return {}
    if not has_avx2(cpuinfo):
        return {}
    set_now = {k: v for k, v in PINS.items() if k not in environ}
    environ.update(set_now)
    return set_now


HUGE_PAGES = {"THP_MEM_ALLOC_ENABLE": "1"}
"""torch's CPU allocator asks for transparent huge pages for blocks of 2 MB and more (madvise): a
fresh block then costs a page fault per 2 MB instead of per 4 kB. With `keep_freed_memory`
(below) the SmolLM2 update's first call went from 13.6 to 10.8 s on the 2-core Xeon,
the steady ones unchanged (10.2-10.3 s). torch reads it at its first allocation."""


def use_huge_pages(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set HUGE_PAGES where not set yet (call before torch allocates; a user's value is kept)."""
    set_now = {k: v for k, v in HUGE_PAGES.items() if k not in environ}
    environ.update(set_now)
    return set_now


MMAP_THRESHOLD, TRIM_THRESHOLD = 1 << 30, -1  # (C ints)
"""glibc's mallopt settings: blocks up to 1 GB come from the heap, and freed heap stays mapped (-1:
never trimmed) instead of going back to the kernel."""


def keep_freed_memory() -> bool:
    """Make glibc's malloc reuse freed memory for large tensors instead of mapping fresh pages.

    By default glibc serves every block above its mmap threshold (at most 32 MB) with a fresh
    mapping and unmaps it on free, so a tensor that large (a chunk of (tokens, vocabulary) logits,
    a micro-batch's activations) costs a page fault per 4 kB each time it is allocated; and freed
    heap above 2 x the threshold goes back to the kernel. Measured on SmolLM2-135M's update (16
    sequences, 2 threads, the 2-core Xeon), in one process each: 16.4 s first and 12.6 s steady
    without, 13.7 s and 10.2-10.6 s with; peak RSS 4.79 -> 4.97 GB. Freed heap is never trimmed: a
    cap of 2 GB sent the loop engine's packed weights (rlvr.rollout.stepper; torch reserves 4x their
    bytes) back to the kernel after every decode, and packing the next decode's took 0.5-1.5 s of
    page faults instead of 0.1-0.2 s. What jemalloc or tcmalloc preloaded would give, from inside the
    process. Returns whether it applied (glibc only)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): their allocators differ
        return False
    return bool(mallopt(-3, MMAP_THRESHOLD)) and bool(mallopt(-1, TRIM_THRESHOLD))  # M_MMAP_, M_TRIM_THRESHOLD


def release_freed_memory() -> None:
    """Hand the heap's free memory back to the kernel now (glibc's malloc_trim): a peak measured after
    it counts what the code that follows maps, not what earlier code freed and the heap kept."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def start_as_rlvr() -> None:
    """The process settings the `rlvr` command makes before torch loads: the kernel pins, huge pages and
    freed memory kept (benches and the test session call it too, so they measure and test what `rlvr`
    runs)."""
    pin_cpu_kernels()
    use_huge_pages()
    keep_freed_memory()
