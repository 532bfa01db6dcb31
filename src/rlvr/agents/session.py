"""One agent episode's token-exact trajectory, built from the requests its program sends.

    session = Session(problem, renderer, tool_format)
    context = session.chat_context(messages, tools)   # normalised messages (rlvr.serve's chat_messages)
    content, calls = session.record(sample, tools)    # after the engine sampled from `context`

The session keeps the token ids it sampled. A request whose conversation is the previous request's
plus the reply it got (the same text, the same calls) and new messages extends the current
segment: only the new messages are rendered (rlvr.rollout.episodes.Renderer.continuation), after
the sampled tokens, which are never re-tokenised. Any other request (history rewritten, a reply
edited, a turn cut at its token budget) starts a new segment from its own rendered prompt; a
segment's turns are trained in the context they were sampled in.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from rlvr.records import Completion, Problem, Turn, fingerprint
from rlvr.rollout.episodes import Renderer
from rlvr.rollout.samples import Sample, kept_of
from rlvr.serve.tools import split_calls as split_hermes
from rlvr.tools.calls import parse_tool_calls

log = logging.getLogger("rlvr.agents")


@dataclass
class Segment:
    context: list[int]
    """The prompt this segment was sampled from, rendered once."""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    drift: bool = False
    """Started because the agent sent the previous reply back otherwise than the endpoint wrote it (the
    rest of the conversation unchanged): a re-serialised reply, counted in rollout/reply_drift_mean."""

    def append(self, ids: list[int], logprobs: list[float] | None, text: str, kept: list[int] | None = None) -> None:
        """A sampled turn (with its log-probs and kept-set records), or tokens a request added (None)."""
        start = len(self.tokens)
        self.tokens += ids
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.kept += kept or [0] * len(ids)
        self.mask += [1 if logprobs is not None else 0] * len(ids)
        sampled = fingerprint(ids) if logprobs is not None else None
        role = "assistant" if logprobs is not None else "env"
        self.turns.append(Turn(role, start, len(self.tokens), text, sampled=sampled))


@dataclass
class _Reply:
    history: list[dict[str, Any]]
    """The conversation that was answered (normalised), with the reply as the model wrote it last."""
    ended: bool
    """The sampled turn ended with the end-of-sequence token (only such a turn can be continued)."""


class Session:
    def __init__(self, problem: Problem, renderer: Renderer, tool_format: str = "hermes") -> None:
        self.problem, self.renderer, self.tool_format = problem, renderer, tool_format
        self.segments: list[Segment] = []
        self.last: _Reply | None = None
        self.history: list[dict[str, Any]] = []
        self._pending: tuple[Segment, list[int], str] | None = None
        """What the request being sampled adds before its sample: a new segment, or the new messages'
        tokens on the current one (kept only once the sample is: a failed request, retried, adds nothing)."""
        self._lock = threading.Lock()
        self.closed = False
        """The episode is over: a late sample is answered but not kept."""
        self.refused: str | None = None
        """Why the endpoint last refused a request of this session (a conversation past the model's context)."""

    def chat_context(self, messages: list[dict[str, Any]], tools: list[dict] | None) -> list[int]:
        """The token context a chat request samples from (see the module docstring)."""
        last, n = self.last, len(self.last.history) if self.last else 0
        self.history = list(messages)
        if last is not None and last.ended and len(messages) > n and messages[:n] == last.history:
            ids = self.renderer.continuation(messages[n:], tools, self.renderer.chat)
            return self._extend(ids, self.renderer.tokenizer.decode(ids))
        first = messages if self.renderer.chat else "\n".join(str(m.get("content", "")) for m in messages)
        drift = (
            last is not None
            and last.ended
            and len(messages) > n
            and messages[: n - 1] == last.history[: n - 1]
            and messages[n - 1].get("role") == "assistant"
        )
        return self._start(self.renderer.prompt(first, tools), drift)

    def text_context(self, prompt: str) -> list[int]:
        """The token context of a text completion: the previous prompt and its completion, continued,
        extend the segment (only the new text is tokenised); anything else starts a new one."""
        last = self.last
        said = last.history[0]["content"] if last is not None and last.history and "text" in last.history[0] else None
        self.history = [{"text": True, "content": prompt}]
        if said is not None and prompt.startswith(said) and len(prompt) > len(said):
            rest = prompt[len(said) :]
            return self._extend(self.renderer.tokenizer(rest, add_special_tokens=False).input_ids, rest)
        return self._start(self.renderer.tokenizer(prompt, add_special_tokens=False).input_ids)

    def _extend(self, ids: list[int], text: str) -> list[int]:
        segment = self.segments[-1]
        self._pending = (segment, ids, text)
        return segment.context + segment.tokens + ids

    def _start(self, context: list[int], drift: bool = False) -> list[int]:
        self._pending = (Segment(context, drift=drift), [], "")
        return list(context)

    def record(self, sample: Sample, tools: list[dict] | None) -> tuple[str, list[tuple[str, dict]], str]:
        """Keep what was sampled (after what its request added); (the text outside tool calls, the calls to
        offered tools, finish reason). Calls to tools the request did not offer stay in the text, where the
        agent sees them, and are counted on the turn (rollout/unoffered_calls_mean) and warned of once."""
        ids, logprobs, finish = sample[:3]
        text = self.renderer.tokenizer.decode(ids, skip_special_tokens=True)
        chat = not (self.history and "text" in self.history[0])
        content, calls = split_calls(text, tools, self.tool_format) if chat else (text, [])
        offered = {t["function"]["name"] for t in tools or []}
        unoffered = [c.name for c in parse_tool_calls(content, self.tool_format) if c.error is None]
        unoffered = [n for n in unoffered if n not in offered] if chat else []
        with self._lock:
            if not self.closed and self._pending is not None:
                segment, added, said_text = self._pending
                if not self.segments or segment is not self.segments[-1]:
                    self.segments.append(segment)
                if added:
                    segment.append(added, None, said_text)
                segment.append(list(ids), list(logprobs), text, kept_of(sample))
                if unoffered:
                    segment.turns[-1].info["unoffered_calls"] = unoffered
            self._pending = None
        if unoffered:
            _warn_once(unoffered, offered)
        if not chat:  # a text completion: continued by prompt + this text
            self.last = _Reply([{"text": True, "content": self.history[0]["content"] + text}], finish == "stop")
            return text, [], finish
        said = {"role": "assistant", "content": content + "".join(_hermes(name, args) for name, args in calls)}
        self.last = _Reply(self.history + [said], finish == "stop")
        return content, calls, finish

    def completion(self, group: int, index: int, version: int, text: str, finish: str) -> Completion:
        """The episode as one trajectory: the first segment's prompt, every segment's tokens in turn; a
        later segment's turns carry the context they were sampled in (trained turn by turn). The session
        is closed: what a request still in flight samples is not kept."""
        with self._lock:
            self.closed = True
        tokens, logprobs, kept, mask, turns = [], [], [], [], []
        first = self.segments[0].context if self.segments else []
        for k, segment in enumerate(self.segments):
            offset = len(tokens)
            for j, t in enumerate(segment.turns):
                context = None if k == 0 else segment.context + segment.tokens[: t.start]
                turns.append(
                    Turn(
                        t.role,
                        t.start + offset,
                        t.end + offset,
                        t.text,
                        info={**t.info, "drift": True} if segment.drift and j == 0 else t.info,
                        context=context,
                        sampled=t.sampled,
                    )
                )
            tokens += segment.tokens
            logprobs += segment.logprobs
            kept += segment.kept
            mask += segment.mask
        return Completion(
            problem_id=self.problem.id,
            group_id=group,
            index=index,
            text=text,
            prompt_ids=first,
            token_ids=tokens,
            logprobs=logprobs,
            kept=kept if any(kept) else None,
            finish_reason=finish,  # type: ignore[arg-type]
            policy_version=version,
            loss_mask=None if all(mask) else mask,
            turns=turns,
        )


_warned = threading.Event()


def _warn_once(names: list[str], offered: set[str]) -> None:
    if not _warned.is_set():
        _warned.set()
        log.warning(
            "the policy called %s, which the request did not offer (offered: %s): the call went back to the "
            "agent as text. Counted in rollout/unoffered_calls_mean; warned once.",
            ", ".join(repr(n) for n in dict.fromkeys(names)),
            ", ".join(sorted(offered)) or "none",
        )


def _hermes(name: str, args: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def split_calls(text: str, tools: list[dict] | None, fmt: str) -> tuple[str, list[tuple[str, dict]]]:
    """(the text outside the calls, the calls to offered tools that read cleanly, as (name, arguments));
    a compact call's one argument is named after the tool's one parameter. Without tools, no calls."""
    if not tools:
        return text, []
    offered = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
    if fmt == "hermes":
        content, found = split_hermes(text, set(offered))
        return content, [(c.name, c.arguments) for c in found]
    calls = []
    for call in parse_tool_calls(text, fmt):
        params = list(offered.get(call.name, {}).get("properties", {}))
        if call.error is None and len(params) == 1:
            calls.append((call.name, {params[0]: call.arguments[""]}))
    return (text.split("<tool_call>")[0].strip() if calls else text), calls
