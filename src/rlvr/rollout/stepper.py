"""One decode step at a time over a KV cache: the model calls of rlvr's decode loop.

    stepper = make_stepper(model, max_new_tokens)
    logits = stepper.prefill(prompts, pad_id, device)  # (B, V) next-token logits of the prompts
    stepper.repeat(group_size)               # B prompts -> B * G rows, one prefill per prompt
    logits = stepper.step(tokens)            # (R,) fed -> (R, V)
    stepper.select(keep)                     # finished rows leave

`HFStepper` drives any transformers model through its own forward and cache.
`LlamaStepper` is a lean forward for Llama-family models on CPU (llama, qwen2:
plain `nn.Linear` layers, no adapters), over a cache preallocated for the whole
decode. The model's own forward spends a decode step in per-layer cache
concatenation, mask building and small ops beside its GEMMs, and the GEMMs at a
decode batch's few rows run well below the matmul peak. So here: the cache is
written in place, one mask per step, attention in SDPA with grouped KV heads;
activations row-major, q/k/v as one product. Where oneDNN has AVX-512 (on an
AVX-512 CPU with RLVR_NATIVE_KERNELS=1, see rlvr.kernels) each linear runs on it
over a weight reordered once per decode into its blocked layout, with the op
after it fused in (silu, silu(gate) * up, the residual add): on the 2-core Xeon
that made a 16-row step's products 1.2x faster than MKL's and the small ops
fewer; capped at AVX2 oneDNN was slower than MKL, which then runs them (the
feature-major layout used before, W @ x, suited MKL on an AMD host and no
longer helps on either). At 128 rows two more costs showed
(32 prompts of ~81 tokens): the prefill, 12% of the rollout, though 58 tokens of
every prompt are the same system prompt and chat header; and dropping finished
rows, 8%, a copy of the whole cache each time a row ends. So the prompts' common
prefix is prefilled once and its keys and values copied to every row, and a
finished row only leaves the linears: its cache row stays (its attention output
unread) until a quarter of the rows have finished, then the cache is compacted.
The weights are taken when the stepper is made (copied where layers are joined
or reordered; one stepper per decode call), so an optimizer step is seen by the
next decode. Its logits equal the HF forward's to
float rounding (tests/test_rollout_stepper.py).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rlvr.scoring import left_pad

COMPACT_AT = 0.75
"""The cache is compacted once no more than this fraction of its rows is still decoding."""


def cache_arg_name(model) -> str:
    """The forward argument that takes the KV cache: 'cache' in newer transformers, else 'past_key_values'."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def cache_of(out):
    return out["cache"] if "cache" in out else out.past_key_values


class HFStepper:
    """The model's own forward and KV cache (any architecture transformers can cache)."""

    def __init__(self, model) -> None:
        self.model, self.cache, self.arg = model, None, cache_arg_name(model)

    def prefill(self, prompts: Sequence[Sequence[int]], pad_id: int, device="cpu") -> torch.Tensor:
        ids, mask = (t.to(device) for t in left_pad(prompts, pad_id))  # (B, P) each
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, P): left padding does not shift positions
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        self.cache, self.mask, self.next_pos = cache_of(out), mask, mask.sum(-1)
        return out.logits[:, -1].float()  # (B, V)

    def repeat(self, g: int) -> None:
        self.cache.batch_repeat_interleave(g)
        self.mask, self.next_pos = self.mask.repeat_interleave(g, 0), self.next_pos.repeat_interleave(g, 0)

    def select(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep)
        self.mask, self.next_pos = self.mask[keep], self.next_pos[keep]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=-1)  # (R, L + 1)
        out = self.model(input_ids=tokens[:, None], attention_mask=self.mask, position_ids=self.next_pos[:, None],
                         use_cache=True, **{self.arg: self.cache})
        self.cache, self.next_pos = cache_of(out), self.next_pos + 1
        return out.logits[:, -1].float()  # (R, V)


@functools.cache
def _mkl_packs() -> bool:
    """Whether MKL's packed GEMM runs here and a weight packed once serves products of any row count
    (its B-packed layout does not depend on the rows; checked once on a small product)."""
    if not (torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")):
        return False
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(40, 24, generator=gen), torch.randn(200, 24, generator=gen)
    packed = torch.ops.mkl._mkl_reorder_linear_weight(w, _Linear.PACK_ROWS)
    return all(torch.allclose(torch.ops.mkl._mkl_linear(x[:m], packed, w, None, m), x[:m] @ w.T, atol=1e-5)
               for m in (1, 3, 16, 200))


class _Linear:
    """Linear layers over the same input as one product (outputs side by side): x (M, K) -> (M, N).

    Where MKL's packed GEMM runs (`_mkl_packs`) the weight is packed once, when the stepper is made,
    into MKL's internal layout, and every product reads that instead of MKL packing the weight again
    on each call: on the 2-core Xeon a decode step's products took 34 ms instead of 45 at 16 rows,
    90 instead of 115 at 128 (bench/bench_decode_rows.py); oneDNN's over its reordered weights was
    slower than either at AVX2 and than this at AVX-512. Packed for 128 rows it serves 1 to 800
    rows as fast as a weight packed for that count (packed for 16, 64 rows and more ran slower than
    unpacked). Elsewhere F.linear on the layer's own weight (concatenated layers: a copy)."""

    PACK_ROWS = 128

    def __init__(self, *layers: nn.Linear) -> None:
        weights = [layer.weight.detach() for layer in layers]
        self.weight = weights[0] if len(weights) == 1 else torch.cat(weights)  # (N, K): a copy only if several
        biases = [layer.bias for layer in layers]
        self.bias = None if all(b is None for b in biases) else torch.cat(
            [b.detach() if b is not None else layer.weight.new_zeros(layer.out_features)
             for b, layer in zip(biases, layers)])
        self.packed = (torch.ops.mkl._mkl_reorder_linear_weight(self.weight, self.PACK_ROWS)
                       if self.weight.dtype == torch.float32 and _mkl_packs() else None)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x @ W^T + b, x (M, K) contiguous."""
        if self.packed is None:
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, self.bias, len(x))


class LlamaStepper:
    """A Llama-family forward over a preallocated KV cache (see the module docstring)."""

    TYPES = ("llama", "qwen2")

    @classmethod
    def supports(cls, model) -> bool:
        cfg = getattr(model, "config", None)
        if cfg is None or getattr(cfg, "model_type", None) not in cls.TYPES:
            return False
        if next(model.parameters()).device.type != "cpu" or torch.is_autocast_enabled("cpu"):
            return False  # (on CUDA the fast path is vLLM; under autocast the model's forward keeps dtypes right)
        if getattr(cfg, "hidden_act", None) != "silu":
            return False
        if getattr(cfg, "pretraining_tp", 1) != 1 or getattr(cfg, "use_sliding_window", False):
            return False
        return all(type(m) is nn.Linear for name, m in model.named_modules() if name.endswith(
            ("_proj", "lm_head")))  # adapters (LoRA) and quantized layers go through the model's forward

    def __init__(self, model, max_new_tokens: int) -> None:
        self.model = model
        self.body = model.model
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.max_new = max_new_tokens
        # q, k, v as one product (one rotary call on q and k together), gate and up as one. This call's
        # weights (a stepper lives for one decode call).
        layers = self.body.layers
        self.qkv = [_Linear(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj) for layer in layers]
        self.o = [_Linear(layer.self_attn.o_proj) for layer in layers]
        self.gate_up = [_Linear(layer.mlp.gate_proj, layer.mlp.up_proj) for layer in layers]
        self.down = [_Linear(layer.mlp.down_proj) for layer in layers]
        self.head = _Linear(model.lm_head)

    def _norm(self, x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        """RMSNorm of x (N, H), as LlamaRMSNorm computes it."""
        return F.rms_norm(x, x.shape[-1:], norm.weight, self.eps)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor,
                 live: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden state of each row's last position (R, H); writes the S new positions' keys and values
        into slots [self.filled, self.filled + S) of the cache rows `live` (R,), all rows when None
        (then S may be > 1). attend: (cache rows, 1, S, filled + S) bool. Activations (R * S, features)."""
        r, s = ids.shape
        start, end = self.filled, self.filled + s
        h = self.body.embed_tokens(ids).view(r * s, -1)  # (N, H), N = R * S
        cos, sin = self.body.rotary_emb(h, positions)  # (R, S, D) each
        cos, sin = cos[:, :, None], sin[:, :, None]  # (R, S, 1, D): one rotation for every head
        hq, hkv, d = self.heads, self.kv_heads, self.head_dim
        half = d // 2
        for i, layer in enumerate(self.body.layers):
            att = layer.self_attn
            qkv = self.qkv[i](self._norm(h, layer.input_layernorm)).view(r, s, hq + 2 * hkv, d)
            qk = qkv[:, :, : hq + hkv]  # (R, S, Hq + Hkv, D)
            qk = qk * cos + torch.cat([-qk[..., half:], qk[..., :half]], dim=-1) * sin  # rotary (rotate-half form)
            q, k_new = qk[:, :, :hq].transpose(1, 2), qk[:, :, hq:].transpose(1, 2)  # (R, Hq, S, D), (R, Hkv, S, D)
            v_new = qkv[:, :, hq + hkv:].transpose(1, 2)  # (R, Hkv, S, D)
            k, v = self.k[i], self.v[i]  # (cache rows, Hkv, slots, D)
            if live is None:
                k[:, :, start:end] = k_new
                v[:, :, start:end] = v_new
                o = self._attend(q.contiguous(), k[:, :, :end], v[:, :, :end], attend, att.scaling)  # (R, Hq, S, D)
            else:  # finished rows stay in the cache: every cache row attends, the live rows' outputs are read
                k[live, :, start] = k_new[:, :, 0]  # (R, Hkv, D)
                v[live, :, start] = v_new[:, :, 0]
                q_all = q.new_zeros(len(k), hq, 1, d)  # (cache rows, Hq, 1, D)
                q_all[live] = q
                o = self._attend(q_all, k[:, :, :end], v[:, :, :end], attend, att.scaling)[live]  # (R, Hq, 1, D)
            h = h + self.o[i](o.transpose(1, 2).reshape(r * s, hq * d))
            gate, up = self.gate_up[i](self._norm(h, layer.post_attention_layernorm)).chunk(2, dim=-1)
            h = h + self.down[i](F.silu(gate) * up)
        self.filled = end
        return self._norm(h.view(r, s, -1)[:, -1], self.body.norm)  # (R, H)

    def _attend(self, q, k, v, attend, scale):
        """SDPA of q (R, Hq, S, D) over k, v (R, Hkv, L, D). One query position: the heads that share
        a KV head are stacked as query positions of it, (R, Hkv, Hq / Hkv, D), which keeps SDPA on its
        fused CPU kernel (enable_gqa with a mask falls back to the unfused math path, measured 28%)."""
        r, hq, s, d = q.shape
        if s == 1 and hq != self.kv_heads:
            o = F.scaled_dot_product_attention(q.view(r, self.kv_heads, hq // self.kv_heads, d), k, v,
                                               attn_mask=attend, scale=scale)  # (R, Hkv, Hq / Hkv, D)
            return o.view(r, hq, 1, d)
        if hq != self.kv_heads:  # prefill: once per decode
            k, v = (t.repeat_interleave(hq // self.kv_heads, 1) for t in (k, v))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attend, scale=scale)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden).float()  # (R, V)

    def prefill(self, prompts: Sequence[Sequence[int]], pad_id: int, device="cpu") -> torch.Tensor:
        """Next-token logits of each prompt (B, V). The prompts' common prefix (a system prompt, a chat
        header) is computed once, on one row, and its keys and values copied to every row; then the
        rest of each prompt, left-padded, attends to it. Slots: [prefix | padded rests | generated]."""
        b = len(prompts)
        c = len(os.path.commonprefix([list(p) for p in prompts])) if b > 1 else 0
        c = max(0, min(c, min(len(p) for p in prompts) - 1))  # every prompt keeps a token: its logits
        ids, mask = left_pad([list(p)[c:] for p in prompts], pad_id)  # (B, S) each
        n = ids.shape[1]
        size = (b, self.kv_heads, c + n + self.max_new, self.head_dim)
        dtype = self.body.embed_tokens.weight.dtype
        self.k = [torch.zeros(size, dtype=dtype) for _ in self.body.layers]  # (B, Hkv, slots, D) per layer
        self.v = [torch.zeros(size, dtype=dtype) for _ in self.body.layers]
        self.valid = torch.zeros(b, size[2], dtype=torch.bool)  # (B, slots): slot holds a real token
        self.valid[:, :c] = True
        self.valid[:, c:c + n] = mask.bool()
        self.filled, self.live = 0, None
        if c:  # the prefix into row 0's slots [0, c), then copied to the other rows
            rows_k, rows_v = self.k, self.v
            self.k, self.v = [t[:1] for t in rows_k], [t[:1] for t in rows_v]
            self._forward(torch.tensor([list(prompts[0][:c])]), torch.arange(c)[None],
                          torch.ones(c, c, dtype=torch.bool).tril()[None, None])
            self.k, self.v = rows_k, rows_v
            for t in self.k + self.v:
                t[1:, :, :c] = t[:1, :, :c]
        positions = c + (mask.cumsum(-1) - 1).clamp(min=0)  # (B, S): padding does not shift positions
        causal = torch.ones(n, n, dtype=torch.bool).tril()  # (S, S)
        attend = causal[None, None] & self.valid[:, None, None, c:c + n]  # (B, 1, S, S)
        attend |= torch.eye(n, dtype=torch.bool)[None, None]  # a padding query attends to itself (never read)
        attend = torch.cat([attend.new_ones(b, 1, n, c), attend], dim=-1)  # (B, 1, S, c + S): the prefix for all
        self.next_pos = c + mask.sum(-1)  # (B,)
        return self._logits(self._forward(ids, positions, attend))

    def repeat(self, g: int) -> None:
        self.k = [t.repeat_interleave(g, 0) for t in self.k]
        self.v = [t.repeat_interleave(g, 0) for t in self.v]
        self.valid, self.next_pos = self.valid.repeat_interleave(g, 0), self.next_pos.repeat_interleave(g, 0)

    def select(self, keep: torch.Tensor) -> None:
        """Keep the decoding rows `keep` (indices into the current ones). The cache is compacted only
        once a quarter of its rows has finished: a copy of all of it per finished row cost 8% of a
        128-row rollout, a finished row left in place costs only its share of attention."""
        rows = len(self.k[0])
        live = (self.live if self.live is not None else torch.arange(rows))[keep]  # (R',) cache rows
        self.next_pos = self.next_pos[keep]
        if len(live) > COMPACT_AT * rows:
            self.live = live
            return
        self.k = [t[live] for t in self.k]
        self.v = [t[live] for t in self.v]
        self.valid, self.live = self.valid[live], None

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.live is None:
            self.valid[:, self.filled] = True
        else:
            self.valid[self.live, self.filled] = True
        attend = self.valid[:, None, None, : self.filled + 1]  # (cache rows, 1, 1, filled + 1)
        hidden = self._forward(tokens[:, None], self.next_pos[:, None], attend, self.live)
        self.next_pos = self.next_pos + 1
        return self._logits(hidden)


def make_stepper(model, max_new_tokens: int):
    """The lean stepper where the model allows it, else the model's own forward."""
    return LlamaStepper(model, max_new_tokens) if LlamaStepper.supports(model) else HFStepper(model)
