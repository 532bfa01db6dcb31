"""CPU kernels pinned to AVX2 before torch loads (rlvr.kernels): the same numbers on every AVX2 machine."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from rlvr.kernels import HUGE_PAGES, PINS, has_avx2, pin_cpu_kernels, use_huge_pages

AVX2 = "processor : 0\nflags : fpu sse2 avx avx2 fma\n"
NO_AVX2 = "processor : 0\nflags : fpu sse2 avx\n"
x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")


@x86
def test_pins_are_set_where_avx2_exists_and_a_users_value_is_kept():
    env = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
    assert pin_cpu_kernels(env, AVX2) == {"ATEN_CPU_CAPABILITY": "avx2"}
    assert env == {**PINS, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
    assert pin_cpu_kernels(no := {}, NO_AVX2) == {} and no == {}
    assert pin_cpu_kernels(opt_out := {"RLVR_NATIVE_KERNELS": "1"}, AVX2) == {} and opt_out == {"RLVR_NATIVE_KERNELS": "1"}
    assert has_avx2(AVX2) and not has_avx2(NO_AVX2)


def test_huge_pages_are_asked_for_unless_the_user_said_otherwise():
    assert use_huge_pages(env := {}) == HUGE_PAGES and env == HUGE_PAGES
    assert use_huge_pages(mine := {"THP_MEM_ALLOC_ENABLE": "0"}) == {} and mine == {"THP_MEM_ALLOC_ENABLE": "0"}


@x86
def test_the_rlvr_command_runs_torch_on_the_pinned_kernels():
    if not has_avx2():
        pytest.skip("this CPU has no AVX2")
    code = ("import contextlib, io, os\nfrom rlvr.cli import main\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['data', '--help'])\n"
            "import torch\nprint(torch.backends.cpu.get_cpu_capability(), os.environ['ONEDNN_MAX_CPU_ISA'])")
    env = {k: v for k, v in __import__("os").environ.items() if k not in PINS}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == ["AVX2", "AVX2"], out.stderr[-2000:]
