"""Peak memory per step: host RSS (and device memory on CUDA), reset at the start of each step.

Linux lets a process reset its own RSS high-water mark (`/proc/self/clear_refs`,
value 5), so `perf/peak_rss_gb` is the peak of this step alone: what the
rollout, reference pass and the micro-batched update needed, not a peak
left over from loading. Elsewhere it is the peak of the process so far
(`ru_maxrss`), which only ever grows.
"""

from __future__ import annotations

import resource
import sys

import torch

_GB = 1024**3


def reset_peak_memory() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # not Linux (or not allowed): the process-wide peak is reported instead
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_rss_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def peak_memory() -> dict[str, float]:
    """{'perf/peak_rss_gb', and 'perf/peak_device_gb' on CUDA} since the last reset."""
    out = {"perf/peak_rss_gb": peak_rss_bytes() / _GB}
    if torch.cuda.is_available():
        out["perf/peak_device_gb"] = torch.cuda.max_memory_allocated() / _GB
    return out
