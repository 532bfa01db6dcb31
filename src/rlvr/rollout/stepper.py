"""One decode step at a time over a KV cache: the model calls of rlvr's decode loop.

    stepper = make_stepper(model, max_new_tokens)
    logits = stepper.prefill(prompts, pad_id, device)  # (B, V) next-token logits of the prompts
    stepper.repeat(group_size)               # B prompts -> B * G rows, one prefill per prompt
    logits = stepper.step(tokens)            # (R,) fed -> (R, V)
    stepper.select(keep)                     # finished rows leave

`HFStepper` drives any transformers model through its own forward and cache.
`LlamaStepper` is a lean forward for Llama-family models on CPU (llama, qwen2:
plain `nn.Linear` layers, no adapters), over caches preallocated for the whole
decode. The model's own forward spends a decode step in per-layer cache
concatenation, mask building and small ops beside its GEMMs, and the GEMMs at a
decode batch's few rows run well below the matmul peak. So here: caches written
in place, activations row-major, q/k/v as one product and gate/up as one, every
linear over weights packed once (`_Linear`): for a decode of at most 16 rows on
rlvr's own GEMM for few rows, which also does the RMSNorm or gated unit before the
product and the residual sum after it (rlvr.rollout.native; its packing is kept
between decodes and redone only when a weight changed), else on MKL's packed GEMM.
At 128 rows (32 prompts of ~81 tokens) three more costs showed: the prefill, 12%
of the rollout, though 58 tokens of every prompt are the same system prompt and
chat header; dropping finished rows, 8%, a copy of the whole cache each time a
row ends; and attention, each row reading its own copy of its prompt's keys and
values (37% of a step once the products were packed). So the prompts' common
prefix is prefilled once and its keys and values copied to every prompt; the
prompts' keys and values are kept once per prompt, not per row; a decode step's
attention reads a prompt's copy for its G rows and each row's own generated
tokens, with one softmax, in one native call per layer that also applies the
rotary embedding and writes the cache (`native.decode_attention`; without the
native kernels, two SDPA calls merged by their log-sum-exps, `_step_attend`); and
a finished row only leaves the linears: its cache row stays (the native attention
reads only the decoding rows' and never compacts; torch's compacts the cache once
a quarter of the rows have finished). The weights are read when
the stepper is made (one stepper per decode call), so an optimizer step is seen
by the next decode. Its logits equal the HF forward's to float rounding
(tests/test_rollout_stepper.py).
"""

from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rlvr.rollout import mkl, native
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
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=self.mask,
            position_ids=self.next_pos[:, None],
            use_cache=True,
            **{self.arg: self.cache},
        )
        self.cache, self.next_pos = cache_of(out), self.next_pos + 1
        return out.logits[:, -1].float()  # (R, V)


def _mkl_packs() -> bool:
    """Whether MKL's packed GEMM runs here (rlvr.rollout.mkl)."""
    return mkl.library() is not None


_SKINNY: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Each layer group's skinny packing, kept from one decode to the next (keyed by its first layer) and
packed again, in place, only when a weight or bias changed (another tensor or a new version: an
optimizer step, a load): fresh memory for every decode's packing cost 0.1-0.2 s of page faults, and
an evaluation's decodes need no packing at all. It holds a copy of the weights while the model lives."""


def _skinny_weight(layers: Sequence[nn.Linear], bias: torch.Tensor | None, lib) -> native.SkinnyWeight:
    shapes = tuple((id(lin), lin.weight.shape) for lin in layers)
    values = tuple(
        (
            lin.weight.data_ptr(),
            lin.weight._version,
            None if lin.bias is None else (lin.bias.data_ptr(), lin.bias._version),
        )
        for lin in layers
    )
    cached_shapes, cached_values, weight = _SKINNY.get(layers[0], (None, None, None))
    if weight is None or cached_shapes != shapes or weight.lib is not lib:
        weight = native.SkinnyWeight([lin.weight for lin in layers], bias, lib)
    elif cached_values != values:
        weight.pack([lin.weight for lin in layers], bias)  # the same layers, new values: into the same buffer
    _SKINNY[layers[0]] = (shapes, values, weight)
    return weight


_MKL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""The same for MKL's packing: each layer group's joined weight (its layers side by side: a copy
where there are several) and MKL's packing of it (`mkl.PackedWeight`), kept from one decode to the
next, joined and packed again into the same buffers only when a weight changed. They stay resident
between decodes, the update's too: ~1.5x the weights (820 MB for SmolLM2: 540 packed, 280 joined),
only where a decode ran on MKL's path (more than native.SKINNY_ROWS rows, or no native kernels)."""


def _mkl_weight(layers: Sequence[nn.Linear]) -> tuple[torch.Tensor, mkl.PackedWeight | None]:
    """(the layers' weights side by side (N, K), MKL's packing of it or None where it does not run)."""
    shapes = tuple((id(lin), lin.weight.shape, lin.weight.dtype) for lin in layers)
    values = tuple((lin.weight.data_ptr(), lin.weight._version) for lin in layers)
    cached_shapes, cached_values, weight, packed = _MKL.get(layers[0], (None, None, None, None))
    if packed is not None and cached_shapes == shapes and cached_values == values:
        return weight, packed
    weights = [lin.weight.detach() for lin in layers]
    if len(weights) == 1:
        weight = weights[0].contiguous()
    elif packed is not None and cached_shapes == shapes:
        torch.cat(weights, out=weight)  # into the buffer it had
    else:
        weight = torch.cat(weights)
    if packed is None or cached_shapes != shapes:
        fp32 = weight.dtype == torch.float32
        packed = mkl.PackedWeight(*weight.shape) if fp32 and _mkl_packs() else None
    if packed is not None:
        packed.pack(weight)  # in place
        _MKL[layers[0]] = (shapes, values, weight, packed)
    return weight, packed


class _Linear:
    """Linear layers over the same input as one product (outputs side by side): x (M, K) -> (M, N).

    For a decode of at most native.SKINNY_ROWS rows (`rows`), where it builds, rlvr's GEMM for few
    rows over its own packing of the weight (rlvr.rollout.native). Otherwise, where MKL's packed GEMM runs
    (`_mkl_packs`), the weight is packed into MKL's internal layout when the stepper is made (kept
    between decodes while the weights stay: `_MKL`; rlvr.rollout.mkl), and every product reads that
    instead of MKL packing the weight again on each call: on the 2-core
    Xeon a decode step's products took 34 ms instead of 45 at 16 rows, 90 instead of 115 at 128
    (bench/bench_decode_rows.py); oneDNN's over its reordered weights was slower than either at AVX2
    and than this at AVX-512. Elsewhere F.linear on the layer's own weight (concatenated layers: a copy)."""

    def __init__(self, *layers: nn.Linear, rows: int | None = None) -> None:
        biases = [layer.bias for layer in layers]
        self.bias = (
            None
            if all(b is None for b in biases)
            else torch.cat(
                [
                    b.detach() if b is not None else layer.weight.new_zeros(layer.out_features)
                    for b, layer in zip(biases, layers)
                ]
            )
        )
        fp32 = layers[0].weight.dtype == torch.float32
        lib = native.library() if fp32 and rows is not None and rows <= native.SKINNY_ROWS else None
        self.skinny = _skinny_weight(layers, self.bias, lib) if lib is not None else None
        self.weight = self.packed = None
        if self.skinny is None:
            self.weight, self.packed = _mkl_weight(layers)  # (N, K): a copy only if several; MKL's packing
        self.ops = native.library() if fp32 else None  # rlvr's RMSNorm and gated unit, where it builds

    def __call__(
        self,
        x: torch.Tensor,
        norm: nn.Module | None = None,
        eps: float = 0.0,
        glu: bool = False,
        residual: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """f(x) @ W^T + b, x (M, K) contiguous, f: the RMSNorm `norm` (eps), the gated unit
        silu(x[:, :K]) * x[:, K:] where glu, else nothing; plus `residual`, in place (returned). The
        skinny GEMM does f and the sum in the same call as the product."""
        norm = None if norm is None else (norm.weight, eps)
        if self.skinny is not None:
            return self.skinny(x, norm, glu, residual)
        if norm is not None or glu:
            x = native.layer_op(self.ops, x, norm, glu)
        if self.packed is None:
            y = F.linear(x, self.weight, self.bias)
            return y if residual is None else residual.add_(y)
        if self.bias is not None:  # the bias first, the product added to it
            residual = self.bias.expand(len(x), -1).contiguous() if residual is None else residual.add_(self.bias)
        return self.packed(x.contiguous(), out=residual)


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
        return all(
            type(m) is nn.Linear for name, m in model.named_modules() if name.endswith(("_proj", "lm_head"))
        )  # adapters (LoRA) and quantized layers go through the model's forward

    def __init__(self, model, max_new_tokens: int, rows: int | None = None) -> None:
        """`rows`: how many rows the decode starts with, where known (at most native.SKINNY_ROWS: that GEMM)."""
        self.model = model
        self.body = model.model
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.max_new = max_new_tokens
        self.scale = self.body.layers[0].self_attn.scaling
        # q, k, v as one product (one rotary call on q and k together), gate and up as one. This call's
        # weights (a stepper lives for one decode call).
        layers = self.body.layers
        self.qkv = [
            _Linear(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, rows=rows)
            for layer in layers
        ]
        self.o = [_Linear(layer.self_attn.o_proj, rows=rows) for layer in layers]
        self.gate_up = [_Linear(layer.mlp.gate_proj, layer.mlp.up_proj, rows=rows) for layer in layers]
        self.down = [_Linear(layer.mlp.down_proj, rows=rows) for layer in layers]
        self.head = _Linear(model.lm_head, rows=rows)

    def _norm(self, x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        """RMSNorm of x (N, H), as LlamaRMSNorm computes it."""
        return F.rms_norm(x, x.shape[-1:], norm.weight, self.eps)

    def _forward(
        self, ids: torch.Tensor, positions: torch.Tensor, attend, real: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Hidden state of each row's last position (R, H), ids and positions (R, S). attend(i, qkv, cos,
        sin) takes layer i's queries, keys and values (R, S, Hq + 2 Hkv, D) before the rotary embedding
        (cos, sin (R, S, D)), stores its keys and values and returns the attention output (R, Hq, S, D).
        Activations (N, features), N = R * S; where `real` (R, S) marks the real tokens of left-padded
        rows, only those: the products skip the padding (a third of a 128-row prefill's rows), which
        is put back, as zeros, around the attention alone."""
        r, s = ids.shape
        hq, hkv, d = self.heads, self.kv_heads, self.head_dim
        kept = None if real is None or bool(real.all()) else real.reshape(-1).nonzero().squeeze(-1)  # (N',)
        h = self.body.embed_tokens(ids).view(r * s, -1)  # (N, H)
        cos, sin = self.body.rotary_emb(h, positions)  # (R, S, D) each
        if kept is not None:
            h = h[kept]  # (N', H)
        for i, layer in enumerate(self.body.layers):
            qkv = self.qkv[i](h, layer.input_layernorm, self.eps)
            if kept is not None:
                qkv = qkv.new_zeros(r * s, qkv.shape[1]).index_copy_(0, kept, qkv)
            o = attend(i, qkv.view(r, s, hq + 2 * hkv, d), cos, sin)  # (R, Hq, S, D)
            o = o.transpose(1, 2).reshape(r * s, hq * d)
            self.o[i](o if kept is None else o[kept], residual=h)  # h += o W^T, in place
            self.down[i](self.gate_up[i](h, layer.post_attention_layernorm, self.eps), glu=True, residual=h)
        last = h.view(r, s, -1)[:, -1] if kept is None else h[real.sum(-1).cumsum(0) - 1]  # (R, H): left padding
        return self._norm(last, self.body.norm)

    def _rotated(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q (R, Hq, S, D), k and v (R, Hkv, S, D) of qkv (R, S, Hq + 2 Hkv, D), q and k rotated (the
        rotate-half form; cos, sin (R, S, D): one rotation for every head)."""
        hq, hkv, half = self.heads, self.kv_heads, self.head_dim // 2
        qk = qkv[:, :, : hq + hkv]  # (R, S, Hq + Hkv, D)
        qk = qk * cos[:, :, None] + torch.cat([-qk[..., half:], qk[..., :half]], dim=-1) * sin[:, :, None]
        return qk[:, :, :hq].transpose(1, 2), qk[:, :, hq:].transpose(1, 2), qkv[:, :, hq + hkv :].transpose(1, 2)

    def _prompt_attend(self, rows: int, start: int, mask: torch.Tensor):
        """Prefill: layer i's new keys and values into slots [start, start + S) of the first `rows` prompt
        rows, and attention over slots [0, start + S) of those rows under `mask` (rows, 1, S, start + S)."""

        def attend(i, qkv, cos, sin):
            q, k_new, v_new = self._rotated(qkv, cos, sin)
            end = start + k_new.shape[2]
            k, v = self.prompt_k[i][:rows], self.prompt_v[i][:rows]
            k[:, :, start:end], v[:, :, start:end] = k_new, v_new
            k, v = k[:, :, :end], v[:, :, :end]
            if self.heads != self.kv_heads:
                k, v = (t.repeat_interleave(self.heads // self.kv_heads, 1) for t in (k, v))
            return F.scaled_dot_product_attention(q.contiguous(), k, v, attn_mask=mask, scale=self.scale)

        return attend

    def _step_attend(self, i, qkv, cos, sin):
        """A decode step's attention, in two parts merged by their log-sum-exps: over the row's prompt,
        each prompt's rows reading its one copy together (the G rows' heads stacked as query positions
        of the KV heads they share), and over the row's own generated tokens. qkv (R, 1, Hq + 2 Hkv, D).
        With rlvr's native kernels one call per layer does the rotary embedding, the cache write and
        both parts with one softmax (`native.decode_attention`)."""
        r, hq, hkv, d = len(qkv), self.heads, self.kv_heads, self.head_dim
        if self.native is not None:
            cache_of = self.live if self.live is not None else self.cache_rows[:r]  # (R,) each row's cache row
            o = native.decode_attention(
                self.native,
                qkv.view(r, hq + 2 * hkv, d),
                hq,
                cos.view(r, d),
                sin.view(r, d),
                self.k[i],
                self.v[i],
                self.generated,
                cache_of,
                self.prompt_k[i],
                self.prompt_v[i],
                self.prompt_mask,
                self.prompt_of,
                self.scale,
                self.scratch,
            )
            return o.view(r, hq, 1, d)
        q, k_new, v_new = self._rotated(qkv, cos, sin)
        g = self.heads // hkv
        q = q.reshape(r, hkv, g, d)
        k, v, t, live = self.k[i], self.v[i], self.generated, self.live  # (cache rows, Hkv, max_new, D)
        if live is None:
            k[:, :, t], v[:, :, t] = k_new[:, :, 0], v_new[:, :, 0]
            q_rows = q
        else:  # finished rows stay in the cache until it is compacted: they attend, their outputs are not read
            k[live, :, t], v[live, :, t] = k_new[:, :, 0], v_new[:, :, 0]
            q_rows = q.new_zeros(len(k), hkv, g, d)
            q_rows[live] = q
        own, own_lse = _flash(q_rows, k[:, :, : t + 1], v[:, :, : t + 1], None, self.scale)  # (cache rows, Hkv, g, D)
        if live is not None:
            own, own_lse = own[live], own_lse[live]
        b, group = len(self.prompt_k[i]), self.group
        every_row = r == b * group  # none has finished: the rows are in their first order
        q_prompts = q if every_row else q.new_zeros(b * group, hkv, g, d).index_copy_(0, self.row_ids, q)
        q_prompts = q_prompts.view(b, group, hkv, g, d).transpose(1, 2).reshape(b, hkv, group * g, d)
        shared, shared_lse = _flash(q_prompts, self.prompt_k[i], self.prompt_v[i], self.prompt_mask, self.scale)
        shared = shared.view(b, hkv, group, g, d).transpose(1, 2).reshape(b * group, hkv, g, d)
        shared_lse = shared_lse.view(b, hkv, group, g).transpose(1, 2).reshape(b * group, hkv, g)
        if not every_row:
            shared, shared_lse = shared[self.row_ids], shared_lse[self.row_ids]
        o = torch.lerp(shared, own, torch.sigmoid(own_lse - shared_lse)[..., None].to(q.dtype))  # (R, Hkv, g, D)
        return o.reshape(r, hkv * g, 1, d)  # (own's share of the softmax mass: sigmoid of the lse difference)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden).float()  # (R, V)

    def prefill(self, prompts: Sequence[Sequence[int]], pad_id: int, device="cpu") -> torch.Tensor:
        """Next-token logits of each prompt (B, V). The prompts' common prefix (a system prompt, a chat
        header) is computed once, on one row, and its keys and values copied to every prompt's row;
        then the rest of each prompt, left-padded, attends to it. Prompt slots: [prefix | padded rest]."""
        b = len(prompts)
        c = len(os.path.commonprefix([list(p) for p in prompts])) if b > 1 else 0
        c = max(0, min(c, min(len(p) for p in prompts) - 1))  # every prompt keeps a token: its logits
        ids, mask = left_pad([list(p)[c:] for p in prompts], pad_id)  # (B, S) each
        n = ids.shape[1]
        size = (b, self.kv_heads, c + n, self.head_dim)
        self.dtype = self.body.embed_tokens.weight.dtype
        fits = self.dtype == torch.float32 and native.attention_supported(self.head_dim, self.heads, self.kv_heads)
        self.native = native.library() if fits else None  # rlvr's decode attention, or torch's
        self.prompt_k = [torch.zeros(size, dtype=self.dtype) for _ in self.body.layers]  # (B, Hkv, c + S, D)
        self.prompt_v = [torch.zeros(size, dtype=self.dtype) for _ in self.body.layers]
        valid = torch.cat([torch.ones(b, c, dtype=torch.bool), mask.bool()], dim=1)  # (B, c + S): a real token
        if c:  # the prefix into row 0's slots [0, c), then copied to the other rows
            self._forward(
                torch.tensor([list(prompts[0][:c])]),
                torch.arange(c)[None],
                self._prompt_attend(1, 0, torch.ones(c, c, dtype=torch.bool).tril()[None, None]),
            )
            for t in self.prompt_k + self.prompt_v:
                t[1:, :, :c] = t[:1, :, :c]
        positions = c + (mask.cumsum(-1) - 1).clamp(min=0)  # (B, S): padding does not shift positions
        causal = torch.ones(n, n, dtype=torch.bool).tril()  # (S, S)
        attend = causal[None, None] & valid[:, None, None, c:]  # (B, 1, S, S)
        attend |= torch.eye(n, dtype=torch.bool)[None, None]  # a padding query attends to itself (never read)
        attend = torch.cat([attend.new_ones(b, 1, n, c), attend], dim=-1)  # (B, 1, S, c + S): the prefix for all
        logits = self._logits(self._forward(ids, positions, self._prompt_attend(b, c, attend), mask.bool()))
        self.prompt_mask = torch.zeros(b, 1, 1, c + n, dtype=self.dtype).masked_fill_(
            ~valid[:, None, None], float("-inf")
        )  # (B, 1, 1, c + S): what a decode step reads
        self.prompt_next_pos = c + mask.sum(-1)  # (B,)
        self.repeat(1)
        return logits

    def repeat(self, g: int) -> None:
        """G rows per prompt (row p * G + j is prompt p's j-th), each with its own cache of generated tokens."""
        rows = len(self.prompt_k[0]) * g
        size = (rows, self.kv_heads, self.max_new, self.head_dim)
        self.k = [torch.empty(size, dtype=self.dtype) for _ in self.body.layers]  # (rows, Hkv, max_new, D)
        self.v = [torch.empty(size, dtype=self.dtype) for _ in self.body.layers]
        self.group, self.generated, self.live = g, 0, None
        self.row_ids = self.cache_rows = torch.arange(rows)  # (R,) each decoding row's first index: prompt and place
        self.prompt_of = self.row_ids // g  # (R,)
        self.next_pos = self.prompt_next_pos.repeat_interleave(g, 0)
        if self.native is not None:
            per_thread = native.scratch_size(self.heads // self.kv_heads, self.prompt_k[0].shape[2], self.max_new)
            self.scratch = torch.empty(torch.get_num_threads(), per_thread)

    def select(self, keep: torch.Tensor) -> None:
        """Keep the decoding rows `keep` (indices into the current ones). A finished row's cache stays
        in place. The native attention reads only the decoding rows' (`live`): the cache is never
        compacted (copying it cost 0.6 s of a 128-row rollout). Torch's attention computes every cache
        row: the cache is compacted once a quarter of its rows has finished (a copy of all of it per
        finished row cost 8% of a 128-row rollout; a finished row in place, its share of attention)."""
        rows = len(self.k[0])
        live = (self.live if self.live is not None else torch.arange(rows))[keep]  # (R',) cache rows
        self.next_pos, self.row_ids, self.prompt_of = self.next_pos[keep], self.row_ids[keep], self.prompt_of[keep]
        if self.native is not None or len(live) > COMPACT_AT * rows:
            self.live = live
            return
        self.k = [t[live] for t in self.k]
        self.v = [t[live] for t in self.v]
        self.live = None

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self._forward(tokens[:, None], self.next_pos[:, None], self._step_attend)
        self.generated += 1
        self.next_pos = self.next_pos + 1
        return self._logits(hidden)


def _flash(q, k, v, mask, scale):
    """Attention of q (B, H, Q, D) over k, v (B, H, L, D) and its log-sum-exp (B, H, Q): SDPA's fused
    CPU kernel; mask None or additive (B, 1, 1, L) in q's dtype."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask, scale=scale)


def make_stepper(model, max_new_tokens: int, rows: int | None = None):
    """The lean stepper where the model allows it, else the model's own forward. `rows`: the decode's
    rows (prompts x G), where known."""
    return LlamaStepper(model, max_new_tokens, rows) if LlamaStepper.supports(model) else HFStepper(model)
