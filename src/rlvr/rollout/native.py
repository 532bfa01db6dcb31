"""rlvr's own CPU kernels for the loop engine's decode step (`native.c`, compiled on first use).

**A GEMM for few rows** (`SkinnyWeight`): x (M, K) @ W^T + b at M <= SKINNY_ROWS over weights packed
once. At 16 rows a decode step is a stream of the weights (540 MB for SmolLM2-135M), and MKL's GEMM,
packed or not, streamed them at 16 GB/s on the 2-core Xeon where a read of the same bytes ran at
33 GB/s: its blocking is made for many rows. Here all of a step's rows (up to 16 at AVX-512, 12 at
AVX2) stay in registers while one panel of the packed weight streams past, once, prefetched ahead
(bench/bench_decode_rows.py: a step's 121 products 27.6 ms instead of 33.4 at 16 rows). Its packed
weight is the weight's own size; MKL's is 3.7x (2 GB of fresh memory per decode for SmolLM2). Past
16 rows MKL's packed GEMM is faster: the stepper uses this only for decodes of at most SKINNY_ROWS.

**A decode step's attention** (`decode_attention`): the rotary embedding, the cache write and every
row's query heads over its prompt's keys (kept once per prompt) and its own generated ones, one
softmax, in one call per layer, where the torch path took two fused-attention calls, the merge of
their log-sum-exps and a dozen copies.

**The ops around the products** (`layer_op`: RMSNorm, the gated unit; the skinny GEMM takes them and
the residual sum in its own call) and **sampling** (`sample`: one pass for the maximum, one over exp,
a blocked walk to the token), where torch ran several passes and ops each.

All compute each output in a fixed order (one fused multiply-add chain over k per GEMM output;
sums in 16-float pieces; one polynomial exponential), so the AVX2 and AVX-512 builds give the same
numbers (tests/test_rollout_native.py). The source is compiled with the machine's C
compiler (`cc`, OpenMP; about 1 s) into $RLVR_KERNEL_CACHE or ~/.cache/rlvr/kernels, named by the
source, flags and compiler, and loaded with ctypes; its OpenMP is the runtime torch loaded, its
threads torch's count. Where it cannot be built (no compiler, no AVX2+FMA) `library()` is None,
logged once, and the stepper keeps torch's kernels.
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
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from rlvr.kernels import has_flag

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native.c")
SKINNY_ROWS = 16
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
    """Compile native.c with `flags` (once per source, flags and compiler); the shared library."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        raise FileNotFoundError("no C compiler (cc) on PATH")
    cmd = [compiler, "-O3", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=fast", "-Wno-psabi", *flags]
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), *cmd[1:], version]).encode()).hexdigest()[:16]
    out_dir = out_dir or cache_dir()
    path = out_dir / f"native-{key}.so"
    if not path.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:  # built aside, then renamed: processes may race
            subprocess.run(
                [*cmd, str(SOURCE), "-lm", "-o", f"{tmp}/lib.so"], check=True, capture_output=True, text=True
            )
            os.replace(f"{tmp}/lib.so", path)
    return path


def load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))  # (torch is imported: its libgomp.so.1 serves the library's OpenMP)
    ptr, i = ctypes.c_void_p, ctypes.c_int
    lib.rlvr_skinny_panel_width.restype = i
    lib.rlvr_skinny_pack.argtypes = [ptr, i, i, ptr, i]
    long, f = ctypes.c_long, ctypes.c_float
    lib.rlvr_skinny_linear.argtypes = [ptr, i, i, ptr, i, ptr, ptr, f, i, ptr, ptr, i]
    lib.rlvr_skinny_linear.restype = i
    lib.rlvr_layer_op.argtypes = [ptr, i, i, ptr, f, i, ptr, i]
    lib.rlvr_layer_op.restype = i
    lib.rlvr_sample.argtypes = [ptr, i, i, f, ptr, ptr, ptr, i]
    lib.rlvr_sample_truncated.argtypes = [ptr, i, i, f, i, f, f, i, ptr, ptr, ptr, ptr, ptr, ptr, i]
    lib.rlvr_decode_attention.argtypes = [
        ptr,
        long,
        ptr,
        long,
        ptr,
        long,
        ptr,
        ptr,
        i,
        i,
        i,
        i,
        f,
        ptr,
        ptr,
        long,
        i,
        i,
        ptr,
        ptr,
        ptr,
        i,
        ptr,
        ptr,
        ptr,
        ptr,
        i,
    ]
    lib.rlvr_decode_attention.restype = i
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernels for this machine, or None where they cannot be built (logged once)."""
    flags = isa_flags()
    if flags is None:
        log.info("rlvr's native kernels need AVX2+FMA; the loop engine uses torch's")
        return None
    try:
        return load(build(flags))
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        log.warning("rlvr's native kernels could not be built (%s); the loop engine uses torch's", str(detail)[:500])
        return None


class SkinnyWeight:
    """Weights (N_i, K) side by side (N = sum N_i) and an optional bias (N,), fp32, packed for `lib`;
    called on x (M, K) -> (M, N)."""

    def __init__(
        self, weights: torch.Tensor | Sequence[torch.Tensor], bias: torch.Tensor | None, lib: ctypes.CDLL
    ) -> None:
        weights = [weights] if isinstance(weights, torch.Tensor) else list(weights)
        self.lib, self.width = lib, lib.rlvr_skinny_panel_width()
        self.n, self.k = sum(w.shape[0] for w in weights), weights[0].shape[1]
        self.packed = torch.empty(-(-self.n // self.width) * self.k * self.width, dtype=torch.float32)
        self.packed_ptr = self.packed.data_ptr()
        self.pack(weights, bias)

    def pack(self, weights: Sequence[torch.Tensor], bias: torch.Tensor | None) -> None:
        """Pack `weights` (the same shapes) into this buffer again: each on its own where every one but
        the last fills whole panels, else joined first."""
        weights = [w.detach() for w in weights]
        if any(w.shape[0] % self.width for w in weights[:-1]):
            weights = [torch.cat(weights)]
        at = self.packed_ptr
        for w in weights:
            w = w.contiguous()
            self.lib.rlvr_skinny_pack(w.data_ptr(), w.shape[0], self.k, at, torch.get_num_threads())
            at += w.shape[0] * self.k * 4
        self.bias = None if bias is None else bias.detach().float().contiguous()
        self.bias_ptr = None if self.bias is None else self.bias.data_ptr()

    def __call__(
        self,
        x: torch.Tensor,
        norm: tuple[torch.Tensor, float] | None = None,
        glu: bool = False,
        residual: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """f(x) @ W^T + b (+ residual, in place: returns it), f: RMSNorm with norm = (weight, eps), the
        gated unit silu(x[:, :K]) * x[:, K:] where glu (x (M, 2K)), else nothing."""
        if not x.is_contiguous():
            x = x.contiguous()
        m, width = x.shape
        if width != self.k * (2 if glu else 1) or (residual is not None and not residual.is_contiguous()):
            raise ValueError(f"SkinnyWeight ({self.n}, {self.k}): x {tuple(x.shape)}, glu={glu}")
        if (norm is not None or glu) and self.k % 16:  # the kernel's ops take 16 floats at a time
            x, norm, glu = torch_layer_op(x, norm, glu), None, False
        y = residual if residual is not None else x.new_empty(m, self.n)
        norm_w = None if norm is None else norm[0] if norm[0].is_contiguous() else norm[0].contiguous()
        rc = self.lib.rlvr_skinny_linear(
            x.data_ptr(),
            m,
            self.k,
            self.packed_ptr,
            self.n,
            self.bias_ptr,
            None if norm_w is None else norm_w.data_ptr(),
            0.0 if norm is None else norm[1],
            glu,
            None if residual is None else residual.data_ptr(),
            y.data_ptr(),
            torch.get_num_threads(),
        )
        if rc != 0:
            raise MemoryError(f"SkinnyWeight: no memory for the ({m}, {self.k}) input of the product")
        return y


def decode_attention(
    lib: ctypes.CDLL,
    qkv: torch.Tensor,
    heads: int,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot: int,
    cache_of: torch.Tensor,
    prompt_k: torch.Tensor,
    prompt_v: torch.Tensor,
    prompt_mask: torch.Tensor,
    prompt_of: torch.Tensor,
    scale: float,
    scratch: torch.Tensor,
) -> torch.Tensor:
    """A decode step's attention (R, Hq, D), fp32. qkv (R, Hq + 2 Hkv, D) contiguous: each row's `heads`
    queries, then its new keys and values, queries and keys before the rotary embedding (rotated here
    by cos, sin (R, D), rotate-half form); the new keys and values are written into the caches (cache
    rows, Hkv, max_new, D) at `slot` of row r's cache row cache_of[r] (R,); prompt_k, prompt_v
    (B, Hkv, L, D) and the additive prompt_mask (B, L) of row r's prompt prompt_of[r] (R,); scratch
    (threads, `scratch_size`): the threads it runs on. (Shapes are checked once, when the stepper sets
    up; here only what a step changes.)"""
    rows, _, d = qkv.shape
    hkv, max_new = k_cache.shape[1], k_cache.shape[2]
    if not (qkv.is_contiguous() and cos.is_contiguous() and sin.is_contiguous()) or cos.shape != (rows, d):
        raise ValueError(f"decode_attention: qkv {tuple(qkv.shape)}, cos {tuple(cos.shape)}: contiguous, (R, D)")
    out = qkv.new_empty(rows, heads, d)
    row, at = qkv.stride(0), qkv.data_ptr()
    rc = lib.rlvr_decode_attention(
        at,
        row,
        at + heads * d * 4,
        row,
        at + (heads + hkv) * d * 4,
        row,
        cos.data_ptr(),
        sin.data_ptr(),
        rows,
        heads,
        hkv,
        d,
        scale,
        k_cache.data_ptr(),
        v_cache.data_ptr(),
        k_cache.stride(0),
        max_new,
        slot,
        cache_of.data_ptr(),
        prompt_k.data_ptr(),
        prompt_v.data_ptr(),
        prompt_k.shape[2],
        prompt_mask.data_ptr(),
        prompt_of.data_ptr(),
        out.data_ptr(),
        scratch.data_ptr(),
        len(scratch),
    )
    if rc != 0:
        raise ValueError(
            f"decode_attention: unsupported shape (D={d}, Hq={heads}, Hkv={hkv}, slot {slot} of {max_new})"
        )
    return out


def scratch_size(g: int, prompt_len: int, max_new: int) -> int:
    """Floats of decode_attention's scratch per thread: a (g, L + max_new) score row, rounded up to 16."""
    return g * -(-(prompt_len + max_new) // 16) * 16


def attention_supported(head_dim: int, heads: int, kv_heads: int) -> bool:
    return head_dim % 16 == 0 and head_dim <= 256 and heads % kv_heads == 0 and heads // kv_heads <= 16


def layer_op(
    lib: ctypes.CDLL | None, x: torch.Tensor, norm: tuple[torch.Tensor, float] | None = None, glu: bool = False
) -> torch.Tensor:
    """The op a Llama layer puts before a product, fp32: RMSNorm of x (M, K) with norm = (weight, eps),
    as LlamaRMSNorm, or the gated unit silu(x[:, :K]) * x[:, K:] of x (M, 2K). rlvr's kernel where
    `lib` is given and K is a multiple of 16 (one pass, vectorised exp), else torch's ops."""
    k = x.shape[1] // (2 if glu else 1)
    if lib is None or k % 16 or x.dtype != torch.float32:
        return torch_layer_op(x, norm, glu)
    x = x.contiguous()
    out = x.new_empty(len(x), k)
    norm_w = None if norm is None else norm[0].detach().contiguous()
    lib.rlvr_layer_op(
        x.data_ptr(),
        len(x),
        k,
        None if norm_w is None else norm_w.data_ptr(),
        0.0 if norm is None else norm[1],
        int(glu),
        out.data_ptr(),
        torch.get_num_threads(),
    )
    return out


def torch_layer_op(x: torch.Tensor, norm: tuple[torch.Tensor, float] | None, glu: bool) -> torch.Tensor:
    if norm is not None:
        return F.rms_norm(x, x.shape[-1:], norm[0], norm[1])
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def sample(
    lib: ctypes.CDLL, logits: torch.Tensor, temperature: float, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of softmax(logits / temperature) (R, V) fp32, by inverse CDF with the row's
    uniform u (R,) in [0, 1), and its log-prob: (R,) int64, (R,) fp32. One pass for the maximum, one
    over exp for the sum and part of one to find the token, where torch's log_softmax, exp, cumsum,
    searchsorted and gather took 7.3 ms a step at 128 rows of SmolLM2's 49,152 logits."""
    logits, u = logits.contiguous(), u.contiguous().float()
    rows, v = logits.shape
    tok, logp = torch.empty(rows, dtype=torch.long), torch.empty(rows)
    lib.rlvr_sample(
        logits.data_ptr(), rows, v, temperature, u.data_ptr(), tok.data_ptr(), logp.data_ptr(), torch.get_num_threads()
    )
    return tok, logp


def sample_truncated(
    lib: ctypes.CDLL, logits: torch.Tensor, temperature: float, rule, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`sample` over the kept set of `rule` (rlvr.algos.truncation.Truncation), renormalised: the token,
    its log-prob and the set's record (size | hash << SIZE_BITS), (R,) each. Two passes over the
    logits for the normaliser, one to gather the candidates (a heap of top_k, else those above the
    rule's bound), the rest on the candidates; torch's version took 6.8-29 ms a step at 128 rows of
    SmolLM2's 49,152 logits."""
    from rlvr.algos.truncation import SIZE_BITS, hash_table

    logits, u = logits.contiguous(), u.contiguous().float()
    rows, v = logits.shape
    tok, logp = torch.empty(rows, dtype=torch.long), torch.empty(rows)
    size, digest = torch.empty(rows, dtype=torch.long), torch.empty(rows, dtype=torch.long)
    lib.rlvr_sample_truncated(
        logits.data_ptr(),
        rows,
        v,
        temperature,
        rule.top_k,
        rule.top_p,
        rule.min_p,
        int(rule.order == "vllm"),
        u.data_ptr(),
        hash_table(v, logits.device).data_ptr(),
        tok.data_ptr(),
        logp.data_ptr(),
        size.data_ptr(),
        digest.data_ptr(),
        torch.get_num_threads(),
    )
    return tok, logp, size | (digest << SIZE_BITS)
