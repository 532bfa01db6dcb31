"""What `rlvr serve --record DIR` keeps, the feedback it takes, and the training data made of both.
DIR may be a URL (s3://, gs://, ...): the files are written in a local copy under .cache/recordings
and uploaded in the background after each write (rlvr.urls.Mirror), and once more at shutdown.

    DIR/served.jsonl     one line per response: id, time, model, arm, the conversation (chat messages as
                         the template rendered them, or the text prompt), prompt and completion token
                         ids, the text, the finish reason
    DIR/feedback.jsonl   one line per POST /v1/feedback: {"response_id", "score"} or {"response_id",
                         "preferred": "a better response"} (both may be given)

    sft, pairs = training_data(DIR, min_score=1.0)   # `rlvr data recording DIR --sft F --pairs F`

SFT records: each served response whose latest score is at least `min_score`, and each preferred
alternative, as chat `messages` ending with the assistant's turn (what `rlvr sft --data` reads; no
gold answer: verifier `env`). Preference pairs (what `rlvr rm train` reads): a preferred alternative
against the response it was given for, and two scored responses to the same conversation, the
higher-scored chosen.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

from rlvr.serve.errors import APIError
from rlvr.urls import Mirror, cache_dir, is_url, join, read_text

MAX_FEEDBACK_CHARS = 100_000
FILES = ("served.jsonl", "feedback.jsonl")
CACHE = ".cache/recordings"
"""Where a recording at a URL is written before it is uploaded (relative to the working directory)."""


class Recorder:
    def __init__(self, directory: str | Path) -> None:
        self._lock = threading.Lock()
        self.mirror = None
        if is_url(directory):
            self.dir = cache_dir(str(directory), CACHE)
            self.mirror = Mirror(self.dir, str(directory), FILES, self._lock)
            self.mirror.pull()  # earlier sessions' recording, to append to
        else:
            self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.served_path, self.feedback_path = (self.dir / name for name in FILES)
        self._ids = {r["id"] for r in _read(self.served_path)}  # earlier sessions' responses take feedback too

    def _append(self, path: Path, row: dict[str, Any]) -> None:
        """Called with the lock held."""
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if self.mirror is not None:
            self.mirror.changed()

    def close(self) -> None:
        """At shutdown: a recording at a URL is uploaded as it is now."""
        if self.mirror is not None:
            self.mirror.close()

    def served(
        self,
        rid: str,
        model: str,
        arm: str,
        conversation: Any,
        prompt_ids: list[int],
        completion_ids: list[int],
        text: str,
        finish: str,
    ) -> None:
        row = {
            "id": rid,
            "time": time.time(),
            "model": model,
            "arm": arm,
            "conversation": conversation,
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "text": text,
            "finish": finish,
        }
        with self._lock:
            self._append(self.served_path, row)
            self._ids.add(rid)

    def feedback(self, body: Any) -> dict[str, Any]:
        """Check and keep one piece of feedback; a 400 or 404 says what is wrong."""
        if not isinstance(body, dict) or not isinstance(body.get("response_id"), str):
            raise APIError(
                400, 'feedback is {"response_id": str, "score": number} and/or "preferred": str', param="response_id"
            )
        if body["response_id"] not in self._ids:
            raise APIError(404, f"no recorded response {body['response_id'][:64]!r}", param="response_id")
        extra = sorted(set(body) - {"response_id", "score", "preferred", "comment"})
        if extra:
            raise APIError(
                400, f"{extra[0]}: not a feedback field (response_id, score, preferred, comment)", param=extra[0]
            )
        score, preferred = body.get("score"), body.get("preferred")
        if score is None and preferred is None:
            raise APIError(400, "feedback needs a score or a preferred response", param="score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float)) or not _finite(score)):
            raise APIError(400, "score: a finite number", param="score")
        if preferred is not None and (
            not isinstance(preferred, str) or not preferred.strip() or len(preferred) > MAX_FEEDBACK_CHARS
        ):
            raise APIError(
                400, f"preferred: a non-empty text of at most {MAX_FEEDBACK_CHARS} characters", param="preferred"
            )
        row = {
            "response_id": body["response_id"],
            "time": time.time(),
            "score": score,
            "preferred": preferred,
            "comment": str(body.get("comment") or "")[:2000],
        }
        with self._lock:
            self._append(self.feedback_path, row)
        return {"ok": True, "response_id": body["response_id"]}


def _finite(x: float) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:  # an integer no float holds
        return False


def _read(location: str | Path) -> list[dict[str, Any]]:
    """The lines of a JSONL file (a path or a URL) that parse (a last line cut by a kill is passed over)."""
    text = read_text(location)
    if text is None:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _chat(conversation: Any, reply: str) -> list[dict[str, str]] | None:
    """The conversation with `reply` as its last assistant turn (chat messages), or None for a text prompt."""
    if not isinstance(conversation, list):
        return None
    return [{"role": m["role"], "content": m["content"]} for m in conversation] + [
        {"role": "assistant", "content": reply}
    ]


def training_data(directory: str | Path, min_score: float = 1.0) -> tuple[list[dict], list[dict]]:
    """(SFT records, preference pairs) from a recording, a directory or a URL (see the module docstring)."""
    served = {r["id"]: r for r in _read(join(directory, "served.jsonl"))}
    latest: dict[str, dict] = {}
    preferred: list[tuple[dict, str]] = []
    for f in _read(join(directory, "feedback.jsonl")):
        r = served.get(f["response_id"])
        if r is None:
            continue
        if f.get("score") is not None:
            latest[r["id"]] = f
        if f.get("preferred"):
            preferred.append((r, f["preferred"]))
    sft, pairs = [], []
    for rid, f in latest.items():
        r = served[rid]
        if f["score"] >= min_score:
            sft.append(_sft(r, r["text"]))
    for r, better in preferred:
        sft.append(_sft(r, better))
        pairs.append(_pair(r, better, r["text"]))
    by_conversation: dict[str, list[dict]] = {}
    for rid, f in latest.items():
        by_conversation.setdefault(json.dumps(served[rid]["conversation"], sort_keys=True), []).append(
            {**served[rid], "score": f["score"]}
        )
    for group in by_conversation.values():
        group.sort(key=lambda r: -r["score"])
        for hi, lo in zip(group, group[1:]):
            if hi["score"] > lo["score"] and hi["text"] != lo["text"]:
                pairs.append(_pair(hi, hi["text"], lo["text"]))
    return [s for s in sft if s is not None], [p for p in pairs if p is not None]


def _sft(r: dict, reply: str) -> dict | None:
    messages = _chat(r["conversation"], reply)
    if messages is None:
        return {"prompt": r["conversation"], "solution": reply, "verifier": "env", "id": f"served:{r['id']}"}
    return {"messages": messages, "verifier": "env", "id": f"served:{r['id']}"}


def _pair(r: dict, chosen: str, rejected: str) -> dict | None:
    if isinstance(r["conversation"], list):
        return {"chosen": _chat(r["conversation"], chosen), "rejected": _chat(r["conversation"], rejected)}
    return {"prompt": r["conversation"], "chosen": chosen, "rejected": rejected}
