"""CPU kernels pinned before torch loads (rlvr.kernels): the same numbers on every x86-64 machine with AVX2."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.kernels import HUGE_PAGES, PINS, has_avx2, pin_cpu_kernels, use_huge_pages

AVX2 = "processor : 0\nflags : fpu sse2 avx avx2 fma\n"
NO_AVX2 = "processor : 0\nflags : fpu sse2 avx\n"
x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")


@x86
def test_pins_are_set_where_avx2_exists_and_a_users_value_is_kept():
    env = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
    assert pin_cpu_kernels(env, AVX2) == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
    assert env == {**PINS, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
    assert pin_cpu_kernels(no := {}, NO_AVX2) == {} and no == {}
    assert pin_cpu_kernels(opt_out := {"RLVR_NATIVE_KERNELS": "1"}, AVX2) == {} and opt_out == {
        "RLVR_NATIVE_KERNELS": "1"
    }
    assert has_avx2(AVX2) and not has_avx2(NO_AVX2)


def test_huge_pages_are_asked_for_unless_the_user_said_otherwise():
    assert use_huge_pages(env := {}) == HUGE_PAGES and env == HUGE_PAGES
    assert use_huge_pages(mine := {"THP_MEM_ALLOC_ENABLE": "0"}) == {} and mine == {"THP_MEM_ALLOC_ENABLE": "0"}


@x86
def test_the_rlvr_command_runs_torch_on_the_pinned_kernels():
    if not has_avx2():
        pytest.skip("this CPU has no AVX2")
    code = (
        "import contextlib, io, os\nfrom rlvr.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['data', '--help'])\n"
        "import torch\nprint(torch.backends.cpu.get_cpu_capability(), os.environ['ONEDNN_MAX_CPU_ISA'])"
    )
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == ["AVX2", "AVX2"], out.stderr[-2000:]


SMALL_GEMMS = """
import hashlib, torch
g = torch.Generator().manual_seed(0)
out = [torch.randn(m, k, generator=g) @ torch.randn(k, n, generator=g)
       for m, k, n in [(9, 41, 32), (32, 41, 9), (41, 32, 9), (64, 577, 200), (128, 128, 1312)]]
print(hashlib.sha1(b"".join(t.numpy().tobytes() for t in out)).hexdigest())
"""


@x86
def test_the_pinned_gemms_give_the_same_numbers_as_mkl_gives_an_intel_host(tmp_path):
    """The products the default run's cold start makes (a 9-token attention among them) under MKL's
    own dispatch and under the dispatch of an Intel host (a shim answering MKL's vendor check):
    identical with the pin, not without it on a CPU that is not Intel's."""
    if not has_avx2() or shutil.which("cc") is None:
        pytest.skip("needs AVX2 and a C compiler")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from mkl_as_intel import intel_env

    shim = intel_env(tmp_path)

    def digest(**env: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", SMALL_GEMMS], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
        )
        return out.stdout.strip() or out.stderr[-2000:]

    pinned = {"MKL_CBWR": PINS["MKL_CBWR"]}
    assert digest(**pinned) == digest(**pinned, **shim)
    if "GenuineIntel" not in Path("/proc/cpuinfo").read_text():  # where the shim changes MKL's mind
        assert digest(MKL_CBWR="AUTO") != digest(MKL_CBWR="AUTO", **shim)
