"""The rollout engine protocol: what the trainer, evaluation and the Ray rollout actor sample through.

    engine = build_engine(cfg.rollout, model, tokenizer)      # rlvr.rollout: 'hf' | 'loop'
    engine.load_weights(model.state_dict().items(), version)  # after an optimizer step
    completions = engine.generate(problems, params, group_offset=offset)

An engine owns its copy of the weights (or shares the trainer's tensors, embedded)
and stamps every Completion with the version of the weights that sampled it.
A second engine (vLLM, a remote pool) implements these two methods and is a
peer of the others: no caller changes. What only some engines can do (a context
bound, speculative decoding, sleeping between calls) is declared in
rlvr.rollout.controls.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from rlvr.algos.truncation import Truncation
from rlvr.configlib import ConfigError
from rlvr.records import Completion, Problem
from rlvr.rollout.episodes import SINGLE_TURN, EpisodeSpec, run_episodes
from rlvr.rollout.samples import Sample
from rlvr.rollout.sync import checksum, tied_names
from rlvr.scoring import compute

NamedTensors = Iterable[tuple[str, torch.Tensor]]


@dataclass(frozen=True)
class SamplingParams:
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_new_tokens: int = 48
    greedy: bool = False
    """Argmax decoding, one completion per problem (evaluation)."""

    @property
    def truncation(self) -> Truncation:
        """The kept set each token is drawn from (rlvr.algos.truncation), in transformers' order."""
        return Truncation(top_k=self.top_k, top_p=self.top_p, min_p=self.min_p)


def sampling_params(rollout, *, greedy: bool = False) -> SamplingParams:
    """The run's sampling settings (a `RolloutConfig`); greedy=True for evaluation."""
    return SamplingParams(
        group_size=rollout.group_size,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        min_p=rollout.min_p,
        max_new_tokens=rollout.max_new_tokens,
        greedy=greedy,
    )


class WeightSyncError(RuntimeError):
    """New weights did not reach a rollout engine (an error, or longer than rollout.sync_timeout_s)."""


class RolloutEngine(Protocol):
    version: int
    """Updates applied to the policy whose weights the engine holds (Completion.policy_version)."""

    def generate(
        self, problems: Sequence[Problem], params: SamplingParams, *, group_offset: int = 0
    ) -> list[Completion]:
        """G completions per problem (1 when greedy), group after group; problem i's get group id
        group_offset + i."""
        ...

    def load_weights(self, named_tensors: NamedTensors, version: int) -> None:
        """Take the trainer's weights (parameter name -> tensor) as policy version `version`."""
        ...

    sync_method: str
    """How the last load_weights moved the weights: 'shared' (the trainer's own tensors: nothing
    moved), 'copy' (into an in-process copy), 'vllm_reload', 'object_store' (Ray)."""
    sync_dtype: torch.dtype | None
    """The dtype the engine holds its weights in (None: as sent), for rlvr.rollout.sync's checksum."""

    def weights_checksum(self) -> int | None:
        """rlvr.rollout.sync's checksum of the weights the engine holds, read back from where it holds
        them (None: not known yet, as in a Ray pool before its workers load them)."""
        ...


def render_prompt(tokenizer, problem: Problem) -> list[int]:
    """A problem's prompt as rollout feeds it: text as it is, chat messages through the chat template
    with the generation prompt (rlvr.rollout.episodes.Renderer)."""
    from rlvr.rollout.episodes import Renderer

    if not isinstance(problem.prompt, str) and getattr(tokenizer, "chat_template", None) is None:
        raise ConfigError(
            f"problem {problem.id!r} is a chat prompt but the model's tokenizer has no chat template; "
            "use a chat model, or data.chat=false to feed text prompts as they are"
        )
    return Renderer(tokenizer).prompt(problem.prompt)


class ModelEngine(ABC):
    """What the in-process engines share: a transformers model and its tokenizer, weights loaded
    in place, `max_rows` sequences per forward batch, the compute precision (rlvr.scoring.compute),
    and the episodes its rollouts run (rlvr.rollout.episodes; one turn unless env.name says more)."""

    def __init__(
        self,
        model,
        tokenizer,
        *,
        max_rows: int = 512,
        version: int = 0,
        dtype: str = "float32",
        episodes: EpisodeSpec = SINGLE_TURN,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_rows = max_rows
        self.version = version
        self.dtype = dtype
        self.episodes = episodes

    @property
    def max_context(self) -> int | None:
        """Positions the model has (prompt + trajectory); episodes end before they run past them."""
        return getattr(getattr(self.model, "config", None), "max_position_embeddings", None)

    def load_weights(self, named_tensors: NamedTensors, version: int) -> None:
        own = self.model.state_dict()
        copied = False
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in own:
                    raise KeyError(
                        f"weight {name!r} is not a parameter of the rollout model "
                        f"({type(self.model).__name__}); were the weights saved from another model?"
                    )
                if own[name].data_ptr() != tensor.data_ptr():  # embedded: the trainer's own tensors, nothing to copy
                    own[name].copy_(tensor)
                    copied = True
        self.sync_method = "copy" if copied else "shared"
        self.version = version

    sync_method = "shared"

    @property
    def sync_dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def weights_checksum(self) -> int:
        tied = tied_names(self.model)
        return checksum(t for name, t in self.model.state_dict().items() if name not in tied)

    def generate(
        self, problems: Sequence[Problem], params: SamplingParams, *, group_offset: int = 0
    ) -> list[Completion]:
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), compute(self.model, self.dtype):
                return run_episodes(self, problems, params, self.episodes, group_offset=group_offset)
        finally:
            self.model.train(was_training)

    @abstractmethod
    def sample(self, contexts: Sequence[Sequence[int]], params: SamplingParams, group_size: int) -> list[Sample]:
        """`group_size` continuations of each token context, context after context (called by
        run_episodes inside generate: model in eval mode, no grad)."""
