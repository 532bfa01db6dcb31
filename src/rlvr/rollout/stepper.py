"""One decode step at a time over a KV cache: the model calls of rlvr's decode loop.

    stepper = make_stepper(model, max_new_tokens)
    logits = stepper.prefill(ids, mask)      # (B, V) next-token logits of left-padded prompts
    stepper.repeat(group_size)               # B prompts -> B * G rows, one prefill per prompt
    logits = stepper.step(tokens)            # (R,) fed -> (R, V)
    stepper.select(keep)                     # finished rows leave

`HFStepper` drives any transformers model through its own forward and cache.
`LlamaStepper` is a lean forward for Llama-family models on CPU (llama, qwen2:
plain `nn.Linear` layers, no adapters), over a cache preallocated for the whole
decode. Profiling the loop engine on SmolLM2-135M (16 rows, 2 threads) showed
61% of the time in `aten::mm` at ~15-20 GFLOP/s while the same matmuls
reach 2-3x that with the weight as the left operand (W @ x^T: the GEMM's long
side is the weight's 49152 or 1536 rows, not the batch's 16), the rest in
per-layer cache concatenation, mask building and small ops. So here: the
small-batch linears computed as W @ x^T, the cache written in place, one mask
per step, RMSNorm fused (F.rms_norm), attention in SDPA with grouped KV heads.
The weights are read from the model's modules at every call, so an
optimizer step on a shared model is seen at once. Its logits equal the HF
forward's to float rounding (tests/test_rollout_stepper.py).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn

SMALL_BATCH = 256
"""Rows up to which a linear is computed as W @ x^T (measured faster on CPU at 16-128 rows)."""


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

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
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


class _Weights:
    """A linear layer's weight (N, K) and bias (N,) or None."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight, self.bias = weight, bias


def _fused(*layers: nn.Linear) -> _Weights:
    """Linear layers over the same input as one: outputs side by side."""
    biases = [layer.bias for layer in layers]
    bias = None if all(b is None for b in biases) else torch.cat(
        [b if b is not None else layer.weight.new_zeros(layer.out_features) for b, layer in zip(biases, layers)])
    return _Weights(torch.cat([layer.weight.detach() for layer in layers]), None if bias is None else bias.detach())


def _linear(x: torch.Tensor, layer: nn.Linear | _Weights) -> torch.Tensor:
    """layer(x) for x (..., K); small batches as (W @ x^T)^T."""
    flat = x.reshape(-1, x.shape[-1])  # (M, K)
    if flat.shape[0] > SMALL_BATCH:
        return F.linear(x, layer.weight, layer.bias)
    out = (layer.weight @ flat.t()).t().contiguous()  # (M, N), row-major for what follows (SDPA's fused kernel)
    if layer.bias is not None:
        out = out + layer.bias
    return out.reshape(*x.shape[:-1], -1)


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
        # q, k, v and gate, up as one matmul each: fewer, longer GEMMs and one rotary call on q and k
        # together. Copies of this call's weights (a stepper lives for one decode call).
        self.qkv = [_fused(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)
                    for layer in self.body.layers]
        self.gate_up = [_fused(layer.mlp.gate_proj, layer.mlp.up_proj) for layer in self.body.layers]

    def _norm(self, x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, self.eps)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        """Hidden state of each row's last position (R, H); writes the S new positions' keys and values
        into slots [self.filled, self.filled + S). attend: (R, 1, S, filled + S) bool."""
        r, s = ids.shape
        start, end = self.filled, self.filled + s
        h = self.body.embed_tokens(ids)  # (R, S, H)
        cos, sin = self.body.rotary_emb(h, positions)  # (R, S, D) each
        cos, sin = cos[:, :, None], sin[:, :, None]  # (R, S, 1, D): one rotation for every head
        hq, hkv, d = self.heads, self.kv_heads, self.head_dim
        for i, layer in enumerate(self.body.layers):
            att = layer.self_attn
            x = self._norm(h, layer.input_layernorm)  # (R, S, H)
            qkv = _linear(x, self.qkv[i]).view(r, s, hq + 2 * hkv, d)  # (R, S, Hq + 2 Hkv, D)
            qk = qkv[:, :, : hq + hkv]  # (R, S, Hq + Hkv, D)
            half = d // 2
            qk = qk * cos + torch.cat([-qk[..., half:], qk[..., :half]], dim=-1) * sin  # rotary (rotate-half form)
            q = qk[:, :, :hq].transpose(1, 2)  # (R, Hq, S, D)
            self.k[i][:, :, start:end] = qk[:, :, hq:].transpose(1, 2)  # (R, Hkv, S, D)
            self.v[i][:, :, start:end] = qkv[:, :, hq + hkv:].transpose(1, 2)
            o = self._attend(q, self.k[i][:, :, :end], self.v[i][:, :, :end], attend, att.scaling)  # (R, Hq, S, D)
            h = h + _linear(o.transpose(1, 2).reshape(r, s, hq * d), att.o_proj)
            x = self._norm(h, layer.post_attention_layernorm)
            gate, up = _linear(x, self.gate_up[i]).chunk(2, dim=-1)  # (R, S, I) each
            h = h + _linear(F.silu(gate) * up, layer.mlp.down_proj)
        self.filled = end
        return self._norm(h[:, -1], self.body.norm)  # (R, H)

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
        return _linear(hidden, self.model.lm_head).float()  # (R, V)

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, p = ids.shape
        size = (b, self.kv_heads, p + self.max_new, self.head_dim)
        dtype = self.body.embed_tokens.weight.dtype
        self.k = [torch.zeros(size, dtype=dtype) for _ in self.body.layers]  # (B, Hkv, slots, D) per layer
        self.v = [torch.zeros(size, dtype=dtype) for _ in self.body.layers]
        self.valid = torch.zeros(b, p + self.max_new, dtype=torch.bool)  # (B, slots): slot holds a real token
        self.valid[:, :p] = mask.bool()
        self.filled = 0
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, P)
        causal = torch.ones(p, p, dtype=torch.bool).tril()  # (P, P)
        attend = causal[None, None] & self.valid[:, None, None, :p]  # (B, 1, P, P)
        attend |= torch.eye(p, dtype=torch.bool)[None, None]  # a padding query attends to itself (never read)
        self.next_pos = mask.sum(-1)  # (B,)
        return self._logits(self._forward(ids, positions, attend))

    def repeat(self, g: int) -> None:
        self.k = [t.repeat_interleave(g, 0) for t in self.k]
        self.v = [t.repeat_interleave(g, 0) for t in self.v]
        self.valid, self.next_pos = self.valid.repeat_interleave(g, 0), self.next_pos.repeat_interleave(g, 0)

    def select(self, keep: torch.Tensor) -> None:
        self.k = [t[keep] for t in self.k]
        self.v = [t[keep] for t in self.v]
        self.valid, self.next_pos = self.valid[keep], self.next_pos[keep]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.valid[:, self.filled] = True
        attend = self.valid[:, None, None, : self.filled + 1]  # (R, 1, 1, filled + 1)
        hidden = self._forward(tokens[:, None], self.next_pos[:, None], attend)
        self.next_pos = self.next_pos + 1
        return self._logits(hidden)


def make_stepper(model, max_new_tokens: int):
    """The lean stepper where the model allows it, else the model's own forward."""
    return LlamaStepper(model, max_new_tokens) if LlamaStepper.supports(model) else HFStepper(model)
