"""`rlvr plan`: the memory, compute and GPUs a run needs, per pool, before anything starts.

    shape = shape_of(model_dir)                      # layers, widths, vocabulary, parameters (config.json)
    table = run_plan(cfg, shape, Cluster(nodes=2, gpus_per_node=8, gpu_gb=80), prompt_len=512)  # rlvr.cli.plan

Memory per pool, from the shapes and the run's settings (bytes; GiB in the table):

- trainer (per rank; FSDP shards the states over its ranks): fp32 master weights (rlvr keeps
  fp32 weights whatever model.dtype), gradients and AdamW's two moments of the trainable
  parameters, activations of one micro-batch (every saved tensor of a decoder layer per token:
  9h + 3 kv + 4 i values; with gradient checkpointing the layer inputs plus one layer's worth),
  the micro-batch's completion logits (fp32 logits, their gathered copy and their gradient: 3 x
  tokens x V x 4 bytes), and under FSDP one gathered layer and the next (prefetch);
- the trainer's log-prob passes without gradient (the PPO anchor when recomputed, the reference):
  64 sequences at a time, their completion logits twice (logits and gathered copy);
- rollout (per replica): the KV cache of its rows at full length (2 x layers x kv width x bytes x
  rows x (prompt + max_new_tokens)), and its own weights unless the engine shares the trainer's
  (embedded hf/loop); vLLM's weights in its dtype;
- inference: the reference weights (fp32; none with LoRA: the adapter is switched off), learned
  reward models and the distillation teacher (4 bytes per parameter; the teacher's log-prob pass
  as the reference's);
- a process's runtime (torch, transformers, rlvr imported): RUNTIME_GB, measured on the 2-core
  CPU machine (ru_maxrss after the imports).

Compute per step: 2 x params x generated tokens (rollout), 6 x params x tokens x ppo_epochs (the
update), 2 x params x tokens per extra log-prob pass (the teacher's with its own parameters); time from stated throughputs. The GPU split
balances rollout and training time (they overlap on Ray) among the splits where everything fits.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

CHUNK_FLOATS = 1 << 24
"""fp32 logits the update upcasts at once (rlvr.scoring.CHUNK_FLOATS; repeated here to keep the
planner free of torch)."""

GB = 2**30
RUNTIME_GB = 0.40
"""Resident memory of a process that imported torch, transformers and rlvr's trainer (ru_maxrss,
torch 2.13 CPU, measured 2026-12-03); a CUDA context adds about 0.5 GB more on a GPU."""
REF_MICRO = 64
"""Sequences per log-prob pass without gradient (rlvr.scoring.completion_logprobs)."""


@dataclass(frozen=True)
class Shape:
    """A decoder-only transformer's sizes (Llama/Qwen/Mistral-style: gated MLP, grouped KV heads)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool = True
    source: str = ""

    @property
    def kv_width(self) -> int:
        return self.hidden // self.heads * self.kv_heads

    @property
    def layer_params(self) -> int:
        h, kv, i = self.hidden, self.kv_width, self.intermediate
        return 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h  # q, o; k, v; gate, up, down; two norms

    @property
    def params(self) -> int:
        embed = self.vocab * self.hidden
        return self.layers * self.layer_params + embed * (1 if self.tied else 2) + self.hidden


# published shapes (Qwen2.5 model cards' config.json) for `--params N`: the nearest is taken
PUBLISHED = {
    "qwen2.5-0.5b": Shape(24, 896, 4864, 14, 2, 151936, True, "Qwen2.5-0.5B config.json"),
    "qwen2.5-1.5b": Shape(28, 1536, 8960, 12, 2, 151936, True, "Qwen2.5-1.5B config.json"),
    "qwen2.5-3b": Shape(36, 2048, 11008, 16, 2, 151936, True, "Qwen2.5-3B config.json"),
    "qwen2.5-7b": Shape(28, 3584, 18944, 28, 4, 152064, False, "Qwen2.5-7B config.json"),
    "qwen2.5-14b": Shape(48, 5120, 13824, 40, 8, 152064, False, "Qwen2.5-14B config.json"),
    "qwen2.5-32b": Shape(64, 5120, 27648, 40, 8, 152064, False, "Qwen2.5-32B config.json"),
    "qwen2.5-72b": Shape(80, 8192, 29568, 64, 8, 152064, False, "Qwen2.5-72B config.json"),
}


def shape_of(model_dir: str | Path) -> Shape:
    """A model directory's shape, from its config.json."""
    path = Path(model_dir) / "config.json"
    c = json.loads(path.read_text())
    c = c.get("text_config", c)
    try:
        return Shape(
            c["num_hidden_layers"],
            c["hidden_size"],
            c["intermediate_size"],
            c["num_attention_heads"],
            c.get("num_key_value_heads") or c["num_attention_heads"],
            c["vocab_size"],
            bool(c.get("tie_word_embeddings", False)),
            str(path),
        )
    except KeyError as exc:
        raise ValueError(
            f"{path}: no {exc.args[0]!r}; rlvr plan reads decoder-only configs "
            "(num_hidden_layers, hidden_size, intermediate_size, heads, vocab_size)"
        ) from None


def shape_for_params(n: float) -> Shape:
    """The published shape whose parameter count is nearest to n (in log scale)."""
    return min(PUBLISHED.values(), key=lambda s: abs(math.log(s.params / n)))


@dataclass(frozen=True)
class Cluster:
    nodes: int = 1
    gpus_per_node: int = 0
    gpu_gb: float = 0.0
    cpus_per_node: int = 0
    host_gb: float = 0.0

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def parse_cluster(text: str | None) -> Cluster:
    """'nodes=2,gpus=8,gpu_gb=80,cpus=64,host_gb=512' (gpus per node)."""
    if not text:
        return Cluster()
    names = {
        "nodes": "nodes",
        "gpus": "gpus_per_node",
        "gpu_gb": "gpu_gb",
        "cpus": "cpus_per_node",
        "host_gb": "host_gb",
    }
    values: dict = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if key.strip() not in names or not value:
            raise ValueError(f"--cluster: {part!r}; give key=value pairs of {', '.join(names)}")
        values[names[key.strip()]] = float(value) if key.strip().endswith("gb") else int(value)
    return Cluster(**values)


def lora_params(shape: Shape, lora) -> int:
    """Trainable parameters of a LoRA adapter: r x (in + out) per targeted projection per layer."""
    h, kv, i = shape.hidden, shape.kv_width, shape.intermediate
    dims = {
        "q_proj": (h, h),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (h, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }
    return shape.layers * sum(lora.r * sum(dims[m]) for m in lora.target_modules if m in dims)


def _activation_bytes(shape: Shape, tokens: int, act_bytes: int, checkpointing: bool) -> float:
    per_layer = 9 * shape.hidden + 3 * shape.kv_width + 4 * shape.intermediate  # saved values per token
    if checkpointing:
        return tokens * act_bytes * (shape.layers * shape.hidden + per_layer)
    return tokens * act_bytes * shape.layers * per_layer


def plan(
    shape: Shape,
    cluster: Cluster,
    *,
    model,
    rollout,
    algo,
    train,
    deploy,
    reward,
    prompt_len: int,
    ranks: int | None = None,
    decode_tps: float | None = None,
    train_tflops: float | None = None,
    reward_params: dict[str, int] | None = None,
    teacher_params: int | None = None,
    sync_gbps: float | None = None,
) -> dict:
    """The plan as plain data: per pool its memory terms (GiB), and the step's tokens, FLOPs, time
    and GPU split. model, rollout, algo, train, deploy, reward: the run's sections of those names.
    ranks: trainer ranks (default: train.world_size, the trainer pool's replicas, 1).
    teacher_params: the algo.distill teacher's parameters (its weights and one log-prob pass a step).
    sync_gbps: GB/s of a weight sync (trainer to rollout engine), for its time a step."""
    t, r, a, m = train, rollout, algo, model
    prompt = prompt_len
    seq = prompt + r.max_new_tokens
    rows = r.batch_size * r.group_size
    ray = deploy.backend == "ray"
    n = ranks or (
        t.world_size if t.strategy == "fsdp" and t.world_size else (deploy.pools["trainer"].replicas if ray else 1)
    )
    p = shape.params
    trainable = lora_params(shape, m.lora) if m.lora.enabled else p
    act_bytes = 2 if m.dtype == "bfloat16" else 4
    micro = (
        max(1, t.micro_batch_tokens // seq)
        if t.micro_batch_tokens  # packed: full-length sequences per budget
        else t.micro_batch_size or math.ceil(rows / t.mini_batches / n)
    )
    recompute = a.recomputes(r.engine)
    no_grad_rows = min(REF_MICRO, rows)
    trainer = {
        "weights": 4 * p / n + (4 * trainable if m.lora.enabled else 0),
        "gradients": 4 * trainable / n,
        "optimizer": 8 * trainable / n,
        "activations": _activation_bytes(shape, micro * seq, act_bytes, m.gradient_checkpointing),
        "logits": 3 * min(CHUNK_FLOATS, micro * r.max_new_tokens * shape.vocab) * 4,  # fp32 chunks (rlvr.scoring)
        "fsdp_gathered_layers": 2 * 4 * shape.layer_params if n > 1 else 0,
    }
    no_grad_logits = 2 * min(CHUNK_FLOATS, no_grad_rows * r.max_new_tokens * shape.vocab) * 4
    if recompute:
        trainer["anchor_logits"] = no_grad_logits
    kv_bytes = 2 if (m.dtype == "bfloat16" or (r.engine == "vllm" and r.vllm.dtype == "bfloat16")) else 4
    replicas = deploy.pools["rollout"].replicas if ray else 1
    rollout_rows = math.ceil(rows / replicas)
    rollout = {
        "kv_cache": 2 * shape.layers * shape.kv_width * kv_bytes * rollout_rows * seq,
        "decode_logits": rollout_rows * shape.vocab * 4 * 2,
    }
    if r.engine == "vllm":
        rollout["weights"] = p * (2 if m.dtype == "bfloat16" or r.vllm.dtype == "bfloat16" else 4)
    elif ray:
        rollout["weights"] = 4 * p  # each worker's own fp32 copy
    inference = {}
    if a.beta > 0 and not m.lora.enabled:
        inference["reference_weights"] = 4 * p
    if a.beta > 0:
        inference["reference_logits"] = no_grad_logits
    for name, count in (reward_params or {}).items():
        inference[f"reward_model_{name}"] = 4 * count
    if teacher_params:
        inference["teacher_weights"] = 4 * teacher_params
        inference["teacher_logits"] = no_grad_logits
    pools = {"trainer": trainer, "rollout": rollout, "inference": inference}
    out_pools = {}
    for name, terms in pools.items():
        total = sum(terms.values()) + RUNTIME_GB * GB * (1 if terms else 0)
        out_pools[name] = {
            "terms_gb": {k: v / GB for k, v in terms.items() if v},
            "runtime_gb": RUNTIME_GB,
            "total_gb": total / GB,
        }
    # one process holds every pool when embedded: the runtime counted once
    embedded_gb = sum(sum(pool["terms_gb"].values()) for pool in out_pools.values()) + RUNTIME_GB

    scorers = deploy.pools["reward"].replicas if ray else 1
    generated = rows * r.max_new_tokens
    tokens = rows * seq
    passes = (1 if recompute else 0) + (1 if a.beta > 0 else 0)
    flops = {
        "rollout": 2 * p * generated,
        "update": 6 * p * tokens * t.ppo_epochs,
        "logprob_passes": 2 * (p * passes + (teacher_params or 0)) * tokens,
    }
    times = {}
    rounds_max = 1 + a.max_extra_rounds if a.filter_zero_std else 1  # dynamic sampling's refills, at most
    if decode_tps:
        times["rollout_s"] = generated / decode_tps
        if rounds_max > 1:  # every round at most one batch of prompts
            times["rollout_worst_s"] = rounds_max * times["rollout_s"]
    if train_tflops:
        times["train_s"] = (flops["update"] + flops["logprob_passes"]) / (train_tflops * 1e12)
    sync = weight_sync(r, deploy, t, m, p)
    if sync_gbps and sync["bytes"]:  # a sync every rollout.sync_every steps
        times["sync_s"] = sync["bytes"] / (sync_gbps * 1e9) / r.sync_every
    result = {
        "model": {**asdict(shape), "params": p, "trainable_params": trainable},
        "settings": {
            "dtype": m.dtype,
            "strategy": t.strategy,
            "trainer_ranks": n,
            "lora": m.lora.enabled,
            "prompt_len": prompt,
            "max_new_tokens": r.max_new_tokens,
            "group_size": r.group_size,
            "prompts_per_step": r.batch_size,
            "micro_batch": micro,
            "gradient_checkpointing": m.gradient_checkpointing,
            "backend": deploy.backend,
            "rollout_engine": r.engine,
            "rollout_replicas": replicas,
            "sampling_rounds_max": rounds_max,
        },
        "pools": out_pools,
        "embedded_process_gb": embedded_gb,
        "rollout_weights_gb": p * (2 if m.dtype == "bfloat16" or r.vllm.dtype == "bfloat16" else 4) / GB,
        "tokens_per_step": tokens,
        "generated_per_step": generated,
        "flops_per_step": flops,
        "times": times,
        "sync": sync,
        # per scorer: the math verifier's worker processes and the sandbox's programs at once, one core each
        "sandbox": {
            "cpus": (reward.math.workers + reward.code.max_parallel) * scorers,
            "memory_gb": reward.code.total_memory_mb * scorers / 1024,
        },
        "cluster": asdict(cluster),
    }
    result["split"] = split_gpus(result, cluster)
    return result


def weight_sync(r, deploy, train, model, params: int) -> dict:
    """How the trainer's weights reach the rollout engine (rlvr.rollout.sync's methods) and the bytes
    each sync moves: nothing when an in-process engine samples with the trainer's own tensors.
    r, deploy, train, model: the run's sections rollout, deploy, train and model."""
    if deploy.backend == "ray":
        method = "object_store"
    elif r.engine == "vllm":
        method = "vllm_reload"
    else:  # hf, loop: the policy's own tensors, unless they are sharded (a full copy to load)
        method = "copy" if train.strategy == "fsdp" else "shared"
    size = 2 if model.dtype == "bfloat16" else 4
    return {"method": method, "bytes": 0 if method == "shared" else params * size, "every_steps": r.sync_every}


def split_gpus(result: dict, cluster: Cluster) -> dict:
    """A split of the cluster's GPUs between rollout and training (plus one for the reference
    when it needs one): among the splits where each pool fits its GPUs, the one whose slower side
    is fastest (rollout and training overlap on Ray); without times, the one closest to even.
    Says what does not fit, and why."""
    if cluster.gpus == 0:
        need = result["embedded_process_gb"]
        fits = not cluster.host_gb or need <= cluster.host_gb
        return {
            "gpus": 0,
            "fits": fits,
            "why": None if fits else f"one process needs {need:.1f} GiB, the node has {cluster.host_gb:.0f} GiB",
        }
    pools, times = result["pools"], result["times"]
    ref = 1 if pools["inference"]["terms_gb"] else 0
    trainer_gb = pools["trainer"]["total_gb"]
    best, reasons = None, []
    for rollout in range(1, cluster.gpus - ref):
        train = cluster.gpus - ref - rollout
        # the trainer's states shard over its ranks (FSDP); activations and logits do not
        states = sum(v for k, v in pools["trainer"]["terms_gb"].items() if k in ("weights", "gradients", "optimizer"))
        per_rank = trainer_gb - states + states * result["settings"]["trainer_ranks"] / train
        # a rollout GPU holds its own weights (embedded hf/loop share the trainer's; here they cannot)
        # and its share of the batch's KV cache
        terms = pools["rollout"]["terms_gb"]
        shared = sum(v for k, v in terms.items() if k != "weights") * result["settings"]["rollout_replicas"] / rollout
        per_rollout = shared + terms.get("weights", result["rollout_weights_gb"]) + RUNTIME_GB
        if per_rank > cluster.gpu_gb:
            reasons.append(f"{rollout} rollout + {train} training GPUs: a training rank needs {per_rank:.1f} GiB")
            continue
        if per_rollout > cluster.gpu_gb:
            reasons.append(f"{rollout} rollout + {train} training GPUs: a rollout GPU needs {per_rollout:.1f} GiB")
            continue
        if "rollout_s" in times and "train_s" in times:
            score = max(times["rollout_s"] / rollout, times["train_s"] / train)
        else:
            score = abs(rollout - train)
        if best is None or score < best[0]:
            best = (score, rollout, train, per_rank, per_rollout)
    if best is None:
        if not reasons:
            why = f"{cluster.gpus} GPU(s) cannot hold a rollout, a training{' and a reference' if ref else ''} pool"
        else:  # the split with the most training GPUs, and the trainer's largest term
            terms = pools["trainer"]["terms_gb"]
            largest = max(terms, key=terms.get)
            why = (
                f"{reasons[0]} (its largest term: {largest} {terms[largest]:.1f} GiB; lower train.micro_batch_size, "
                "set model.gradient_checkpointing, LoRA, or add GPUs)"
            )
        return {"gpus": cluster.gpus, "fits": False, "why": why}
    score, rollout, train, per_rank, per_rollout = best
    out = {
        "gpus": cluster.gpus,
        "fits": True,
        "rollout_gpus": rollout,
        "trainer_gpus": train,
        "inference_gpus": ref,
        "trainer_rank_gb": per_rank,
        "rollout_gpu_gb": per_rollout,
        "not_fitting": reasons[:5],
    }
    if "rollout_s" in times and "train_s" in times:
        out["step_s"] = score
    return out
