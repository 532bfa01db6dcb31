"""rlvr's native kernels for the decode step (rlvr.rollout.native): the GEMM for few rows gives
F.linear's numbers at every row count and shape (row blocks, a last partial panel, bias or none),
the decode attention torch's (prompt padding, finished rows, head sizes), each the same numbers
from its AVX2 and AVX-512 builds; and torch's kernels where they cannot be built. The stepper's
use of them: tests/test_rollout_stepper.py."""

import logging

import pytest
import torch
import torch.nn.functional as F

from rlvr.kernels import has_flag
from rlvr.rollout import native

pytestmark = pytest.mark.skipif(native.isa_flags() is None, reason="rlvr's native kernels need AVX2+FMA")


@pytest.fixture(scope="module")
def builds():
    """The AVX2 build, and the AVX-512 one where this CPU runs it: from the kernel cache the engines use
    (named by the source, the flags and the compiler, so a build of an older native.c is never found)."""
    flags = {"avx2": ["-mavx2", "-mfma"]}
    if has_flag("avx512f"):
        flags["avx512"] = ["-mavx2", "-mfma", "-mavx512f"]
    return {name: native.load(native.build(f)) for name, f in flags.items()}


@pytest.mark.parametrize("n, k", [(37, 19), (64, 96), (960, 576)])
def test_skinny_gemm_equals_linear_at_every_row_count(builds, n, k):
    gen = torch.Generator().manual_seed(n)
    w, b = torch.randn(n, k, generator=gen), torch.randn(n, generator=gen)
    rows = (1, 2, 7, 11, 12, 13, 16, 17, 40)  # whole and partial row blocks: 12 rows at AVX2, 16 at AVX-512
    xs = [torch.randn(m, k, generator=gen) for m in rows]
    outputs = {}
    for name, lib in builds.items():
        with_bias, without = native.SkinnyWeight(w, b, lib), native.SkinnyWeight(w, None, lib)
        for x in xs:
            m = len(x)
            got = outputs[name, m] = with_bias(x)
            torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-4)
            torch.testing.assert_close(without(x), x @ w.T, rtol=1e-5, atol=1e-4)
    if "avx512" in builds:  # one fused multiply-add chain per output: the vector width does not show
        assert all(torch.equal(outputs["avx2", m], outputs["avx512", m]) for _, m in outputs)


def test_skinny_gemm_with_the_layer_ops_around_it(builds):
    gen = torch.Generator().manual_seed(1)
    w, norm_w = torch.randn(48, 32, generator=gen), torch.rand(32, generator=gen) + 0.5
    x, gated = torch.randn(5, 32, generator=gen) * 3, torch.randn(5, 64, generator=gen)
    h = torch.randn(5, 48, generator=gen)
    for lib in builds.values():
        weight = native.SkinnyWeight(w, None, lib)
        torch.testing.assert_close(weight(x, norm=(norm_w, 1e-5)), F.linear(F.rms_norm(x, (32,), norm_w, 1e-5), w))
        gate, up = gated.chunk(2, dim=-1)
        torch.testing.assert_close(weight(gated, glu=True), F.linear(F.silu(gate) * up, w))
        stream = h.clone()
        assert weight(x, residual=stream) is stream  # the residual stream, updated in place
        torch.testing.assert_close(stream, h + F.linear(x, w))
        with pytest.raises(ValueError, match="glu=True"):
            weight(x, glu=True)  # the gated unit takes (M, 2K)
        wide = torch.cat([torch.linspace(-100, 100, 64)[None], gated])  # exp's clamps: silu(-100) is -0
        gate, up = wide.chunk(2, dim=-1)
        torch.testing.assert_close(native.layer_op(lib, wide, glu=True), F.silu(gate) * up)
        torch.testing.assert_close(native.layer_op(lib, x, (norm_w, 1e-5)), F.rms_norm(x, (32,), norm_w, 1e-5))


def test_without_a_compiler_the_stepper_uses_mkl(monkeypatch, tmp_path, caplog):
    import rlvr.rollout.stepper as stepper_module

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("RLVR_KERNEL_CACHE", str(tmp_path))
    native.library.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="rlvr.rollout.native"):
            assert native.library() is None
        assert "could not be built" in caplog.text and "no C compiler" in caplog.text
        linear = stepper_module._Linear(torch.nn.Linear(8, 5), rows=4)
        assert linear.skinny is None and (linear.packed is not None) == stepper_module._mkl_packs()
        x = torch.randn(4, 8)
        torch.testing.assert_close(linear(x), F.linear(x, linear.weight, linear.bias))
    finally:
        native.library.cache_clear()  # later tests build (or find) the real one


@pytest.mark.parametrize("d, hq, hkv", [(64, 9, 3), (16, 4, 4), (80, 4, 1), (128, 4, 2)])
def test_decode_attention_equals_softmax_attention(builds, d, hq, hkv):
    gen = torch.Generator().manual_seed(d + hq)
    b, plen, max_new, slot = 3, 7, 5, 2
    prompt_k, prompt_v = (torch.randn(b, hkv, plen, d, generator=gen) for _ in range(2))
    mask = torch.zeros(b, 1, 1, plen)
    mask[0, ..., :3] = mask[2, ..., :1] = float("-inf")  # left padding
    cache_of, prompt_of = torch.tensor([4, 0, 2, 3]), torch.tensor([2, 0, 1, 1])  # rows 1 and 5 of the cache finished
    qkv = torch.randn(4, hq + 2 * hkv, d, generator=gen)  # each row's queries, new keys and values
    q, k_new, v_new = qkv[:, :hq], qkv[:, hq : hq + hkv], qkv[:, hq + hkv :]
    angles = torch.rand(4, d // 2, generator=gen).repeat(1, 2) * 6  # (R, D): the rotary embedding's cos and sin
    cos, sin = angles.cos(), angles.sin()
    half = d // 2

    def rotated(x, r):  # x (..., D) in float64, the rotate-half form
        return x.double() * cos[r].double() + torch.cat([-x[..., half:], x[..., :half]], -1).double() * sin[r].double()

    caches = torch.randn(2, 6, hkv, max_new, d, generator=gen)
    g = hq // hkv
    expect = torch.empty(4, hq, d, dtype=torch.float64)
    for r, (c, p) in enumerate(zip(cache_of.tolist(), prompt_of.tolist())):
        for h in range(hkv):
            own_k = torch.cat([caches[0, c, h, :slot].double(), rotated(k_new[r, h, None], r)])
            own_v = torch.cat([caches[1, c, h, :slot], v_new[r, h, None]])
            keys, values = torch.cat([prompt_k[p, h].double(), own_k]), torch.cat([prompt_v[p, h], own_v]).double()
            scores = rotated(q[r, h * g : (h + 1) * g], r) @ keys.T / d**0.5
            scores[:, :plen] += mask[p, 0, 0].double()
            expect[r, h * g : (h + 1) * g] = scores.softmax(-1) @ values
    outputs = []
    for lib in builds.values():
        k_cache, v_cache = caches[0].clone(), caches[1].clone()
        scratch = torch.empty(2, native.scratch_size(g, plen, max_new))
        out = native.decode_attention(
            lib,
            qkv,
            hq,
            cos,
            sin,
            k_cache,
            v_cache,
            slot,
            cache_of,
            prompt_k,
            prompt_v,
            mask,
            prompt_of,
            d**-0.5,
            scratch,
        )
        torch.testing.assert_close(out.double(), expect, rtol=1e-5, atol=1e-5)
        rotated_k = torch.stack([rotated(k_new[r], r) for r in range(4)])  # the cache keeps keys rotated
        torch.testing.assert_close(k_cache[cache_of, :, slot].double(), rotated_k)
        assert torch.equal(v_cache[cache_of, :, slot], v_new)
        untouched = [1, 5]  # finished rows' caches, and every other slot, as they were
        assert torch.equal(k_cache[untouched], caches[0][untouched])
        assert torch.equal(k_cache[:, :, :slot], caches[0][:, :, :slot])
        outputs.append(out)
    assert all(torch.equal(outputs[0], o) for o in outputs[1:])  # AVX2 and AVX-512: the same numbers


def test_sample_draws_from_the_softmax(builds):
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(1, 97, generator=gen) * 2  # a vocabulary that is not a multiple of 16
    logits[0, [5, 40, 96]] = float("-inf")  # probability 0: never drawn
    n, temperature = 100_000, 1.3
    probs = torch.softmax(logits[0] / temperature, -1)
    u = torch.rand(n, generator=gen)
    u[:2] = torch.tensor([0.0, 1 - 2**-24])  # the ends of [0, 1)
    draws = []
    for lib in builds.values():
        tok, logp = native.sample(lib, logits.expand(n, -1), temperature, u)
        assert probs[tok].min() > 0
        freq = torch.bincount(tok, minlength=97) / n
        assert (freq - probs).abs().max() < 5 * (probs * (1 - probs) / n).sqrt().max()  # five standard errors
        torch.testing.assert_close(logp, probs.log()[tok])
        draws.append(tok)
    assert all(torch.equal(draws[0], t) for t in draws[1:])


@pytest.mark.parametrize("order", ["hf", "vllm"])
def test_truncated_sample_keeps_the_sets_torch_keeps(builds, order):
    """The native truncated sampler against rlvr.algos.truncation's own (torch) kept sets: the same
    size and hash per row, every draw inside the set, its log-prob that of the renormalised set."""
    from rlvr.algos.truncation import SIZE_BITS, Truncation, prefix_records

    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(64, 1001, generator=gen) * torch.linspace(0.5, 6, 64)[:, None]  # flat to peaked rows
    u = torch.rand(64, generator=gen)
    temperature = 0.9
    for rule in (
        Truncation(top_p=0.9, order=order),
        Truncation(top_k=20, order=order),
        Truncation(min_p=0.05, order=order),
        Truncation(top_k=50, top_p=0.8, min_p=0.02, order=order),
    ):
        z = logits / temperature
        vals, ids, n = rule.kept_prefix(z)
        want = prefix_records(ids, n, z.shape[-1])
        for lib in builds.values():
            tok, logp, records = native.sample_truncated(lib, logits, temperature, rule, u)
            assert torch.equal(records & ((1 << SIZE_BITS) - 1), n) and torch.equal(records, want), rule
            kept = [set(ids[r, : n[r]].tolist()) for r in range(64)]
            assert all(int(tok[r]) in kept[r] for r in range(64))
            norm = torch.logsumexp(vals.masked_fill(torch.arange(vals.shape[1]) >= n[:, None], float("-inf")), -1)
            torch.testing.assert_close(logp, z.gather(-1, tok[:, None]).squeeze(-1) - norm, atol=1e-5, rtol=0)
