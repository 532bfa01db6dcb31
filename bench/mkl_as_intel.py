"""Run MKL as it runs on an Intel host: the arithmetic of an AVX-512 Intel machine on an AMD one.

MKL picks its GEMM kernels by instruction set *and* vendor: on an AMD CPU it takes its AVX2 path even
where the CPU has AVX-512, and `MKL_CBWR` / `MKL_ENABLE_INSTRUCTIONS` cannot move it there. MKL asks
the vendor through one exported function, `mkl_serv_intel_cpu_true`; a shim that answers 1, loaded
first (LD_PRELOAD), makes MKL take the kernels an Intel CPU with the same instructions gets. On an
AMD CPU with AVX-512 (Zen 4) those are the AVX-512 kernels of an Intel Xeon, executed for real, not
imitated: the 2-core Xeon's seed-0 default run was 18.0% -> 35.6% and so is this one's unpinned.

    env = intel_env()           # {"LD_PRELOAD": ...} for a child process
    isa(env)                    # what MKL says it dispatches to under env (MKL_VERBOSE)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

SHIM = "int mkl_serv_intel_cpu_true(void) { return 1; }\nint mkl_serv_intel_cpu(void) { return 1; }\n"


def intel_env(build_dir: Path | None = None) -> dict[str, str]:
    """The environment (LD_PRELOAD of a freshly compiled shim) under which MKL takes Intel's kernels."""
    build_dir = build_dir or Path(tempfile.mkdtemp(prefix="mkl-intel-"))
    src, lib = build_dir / "mkl_intel.c", build_dir / "libmkl_intel.so"
    src.write_text(SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)], check=True)
    return {"LD_PRELOAD": str(lib)}


def isa(env: dict[str, str]) -> str:
    """MKL's own words for the kernels `rlvr` runs under `env`: its MKL_VERBOSE banner and CNR mode."""
    probe = (
        "from rlvr.kernels import start_as_rlvr; start_as_rlvr(); import torch; torch.ones(64, 64) @ torch.ones(64, 64)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **env, "MKL_VERBOSE": "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    banner = next(line for line in out if line.startswith("MKL_VERBOSE oneMKL"))
    cnr = next(word for line in out if "GEMM" in line for word in line.split() if word.startswith("CNR:"))
    return f"{banner.split(' for ', 1)[1].split(', Lnx')[0]}, {cnr}"


if __name__ == "__main__":
    print("native:", isa({}))
    print("as on Intel:", isa(intel_env()))
