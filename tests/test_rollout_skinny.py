"""rlvr's GEMM for a decode step's few rows (rlvr.rollout.skinny): F.linear's numbers at every row
count and shape (row blocks, a last partial panel, bias or none), the same numbers from its AVX2 and
AVX-512 builds, and the MKL path where it cannot be built."""

import logging

import pytest
import torch
import torch.nn.functional as F

from rlvr.kernels import has_flag
from rlvr.rollout import skinny

pytestmark = pytest.mark.skipif(skinny.isa_flags() is None, reason="the skinny GEMM needs AVX2+FMA")


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The AVX2 build, and the AVX-512 one where this CPU runs it."""
    out = tmp_path_factory.mktemp("kernels")
    flags = {"avx2": ["-mavx2", "-mfma"]}
    if has_flag("avx512f"):
        flags["avx512"] = ["-mavx2", "-mfma", "-mavx512f"]
    return {name: skinny.load(skinny.build(f, out)) for name, f in flags.items()}


@pytest.mark.parametrize("n, k", [(37, 19), (64, 96), (960, 576)])
def test_equals_linear_at_every_row_count(builds, n, k):
    gen = torch.Generator().manual_seed(n)
    w, b = torch.randn(n, k, generator=gen), torch.randn(n, generator=gen)
    rows = (1, 2, 7, 11, 12, 13, 16, 17, 40)  # whole and partial row blocks: 12 rows at AVX2, 16 at AVX-512
    xs = [torch.randn(m, k, generator=gen) for m in rows]
    outputs = {}
    for name, lib in builds.items():
        with_bias, without = skinny.SkinnyWeight(w, b, lib), skinny.SkinnyWeight(w, None, lib)
        for x in xs:
            m = len(x)
            got = outputs[name, m] = with_bias(x)
            torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-4)
            torch.testing.assert_close(without(x), x @ w.T, rtol=1e-5, atol=1e-4)
    if "avx512" in builds:  # one fused multiply-add chain per output: the vector width does not show
        assert all(torch.equal(outputs["avx2", m], outputs["avx512", m]) for _, m in outputs)


def test_without_a_compiler_the_stepper_uses_mkl(monkeypatch, tmp_path, caplog):
    import rlvr.rollout.stepper as stepper_module

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("RLVR_KERNEL_CACHE", str(tmp_path))
    skinny.library.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="rlvr.rollout.skinny"):
            assert skinny.library() is None
        assert "could not be built" in caplog.text and "no C compiler" in caplog.text
        linear = stepper_module._Linear(torch.nn.Linear(8, 5), rows=4)
        assert linear.skinny is None and (linear.packed is not None) == stepper_module._mkl_packs()
        x = torch.randn(4, 8)
        torch.testing.assert_close(linear(x), F.linear(x, linear.weight, linear.bias))
    finally:
        skinny.library.cache_clear()  # later tests build (or find) the real one
