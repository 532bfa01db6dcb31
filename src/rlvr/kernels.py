"""The same CPU kernels on every x86-64 machine with AVX2: ATen's and oneDNN's dispatch pinned to AVX2.

torch on the CPU computes with whatever its libraries pick for the processor: ATen's vectorised
kernels (AVX2 or AVX-512), oneDNN's, and MKL's GEMM kernels (by instruction set and by vendor).
Each choice rounds differently, and 500 cold-start SFT steps amplify one ulp into another
checkpoint: the same seed started at 25.4% held-out accuracy on one 2-core machine and 23.2% on
another. This pins the first two before torch loads:

    ATEN_CPU_CAPABILITY=avx2   ATen's kernel dispatch
    ONEDNN_MAX_CPU_ISA=AVX2    oneDNN's

On an AVX2 machine that is what torch picks anyway; on an AVX-512 machine it trades some speed
for the AVX2 numbers. MKL's choice is not pinned yet: MKL_CBWR=AVX2 (its reproducibility mode)
changes the numbers of a training run even on an AVX2 machine, so pinning it means re-measuring
every figure. A value already in the environment is kept, and RLVR_NATIVE_KERNELS=1 leaves both alone.

`start_as_rlvr` makes these pins and asks torch's allocator for huge pages (`use_huge_pages`), as the
`rlvr` command does before torch loads.
"""

from __future__ import annotations

import os
import platform
from collections.abc import MutableMapping

PINS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


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


def onednn_avx512(environ: MutableMapping[str, str] = os.environ, cpuinfo: str | None = None) -> bool:
    """Whether oneDNN may use AVX-512 here: the CPU has it and its ISA is not capped below (the pins)."""
    isa = environ.get("ONEDNN_MAX_CPU_ISA", environ.get("DNNL_MAX_CPU_ISA", "ALL")).upper()
    return has_flag("avx512f", cpuinfo) and (isa == "ALL" or isa.startswith(("AVX512", "AVX10")))


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
(rlvr.train.memory) the SmolLM2 update's first call went from 13.6 to 10.8 s on the 2-core Xeon,
the steady ones unchanged (10.2-10.3 s). torch reads it at its first allocation."""


def use_huge_pages(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set HUGE_PAGES where not set yet (call before torch allocates; a user's value is kept)."""
    set_now = {k: v for k, v in HUGE_PAGES.items() if k not in environ}
    environ.update(set_now)
    return set_now


def start_as_rlvr() -> None:
    """The process settings the `rlvr` command makes before torch loads: the kernel pins and huge pages
    (benches and the test session call it too, so they measure and test what `rlvr` runs)."""
    pin_cpu_kernels()
    use_huge_pages()
