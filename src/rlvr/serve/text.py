"""Generated tokens to text deltas: incremental decoding, stop sequences, the finish reason.

Text that could be the start of a stop sequence is held back until the next tokens settle it, so a
stream never shows a stop sequence or a part of one; a multi-byte character split across tokens is
held until it is whole.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

FinishReason = Literal["stop", "length", "stop_sequence"]


class TextStream:
    def __init__(self, tokenizer, eos_ids: Collection[int], stop: Sequence[str], max_tokens: int) -> None:
        self.tokenizer, self.eos_ids, self.max_tokens = tokenizer, eos_ids, max_tokens
        self.stop = [s for s in stop if s]
        self.tokens: list[int] = []
        self.completion_tokens = 0
        self.text = ""
        """What was handed out so far (the whole completion once done)."""
        self.reason: FinishReason | None = None
        self.stop_sequence: str | None = None

    @property
    def done(self) -> bool:
        return self.reason is not None

    def feed(self, ids: Sequence[int]) -> str:
        """The new text that is safe to show after these tokens ('' while it is held back)."""
        for token in ids:
            if self.done:
                break
            self.completion_tokens += 1
            if token in self.eos_ids:
                self.reason = "stop"
            else:
                self.tokens.append(token)
                if self.completion_tokens >= self.max_tokens:
                    self.reason = "length"
        return self._advance(final=self.done)

    def finish(self) -> str:
        """The held-back rest when the generator ended on its own (an end-of-sequence id it stopped
        at without handing it over, or max_tokens)."""
        if not self.done:
            self.reason = "length" if self.completion_tokens >= self.max_tokens else "stop"
        return self._advance(final=True)

    def _advance(self, *, final: bool) -> str:
        full = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        hits = [(i, s) for s in self.stop if (i := full.find(s, max(0, len(self.text) - len(s) + 1))) >= 0]
        if hits:
            at, seq = min(hits)
            self.reason, self.stop_sequence = "stop_sequence", seq
            return self._emit(full[: max(at, len(self.text))])
        if final:
            return self._emit(full)
        if full.endswith("\ufffd"):  # a character cut between two tokens
            return ""
        hold = max((k for s in self.stop for k in range(1, len(s)) if full.endswith(s[:k])), default=0)
        return self._emit(full[: len(full) - hold])

    def _emit(self, upto: str) -> str:
        delta = upto[len(self.text) :] if upto.startswith(self.text) else ""
        if delta:
            self.text += delta
        return delta
