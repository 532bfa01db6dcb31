"""Format rewards: 1.0 when the output has the required shape, else 0.0; the shape is chosen by
the problem's verifier (math: `reward.format.kind`, code: `reward.format.code_kind`).

Strict on purpose: a lenient structure check is the easiest reward to hack
(a second <answer> block, text after the answer, tags nested inside tags).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rlvr.config.reward import FormatConfig

_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_THINK_ANSWER_RE = re.compile(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", re.DOTALL)
_ANSWER_RE = re.compile(r"(.*?)<answer>(.*?)</answer>\s*", re.DOTALL)
_FENCE_RE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


def think_answer_format(text: str) -> float:
    """Exactly one <think> block, then exactly one non-empty <answer> block, nothing after
    it, nothing between them but whitespace, and no tag nested inside either block."""
    m = _THINK_ANSWER_RE.fullmatch(text)
    if not m:
        return 0.0
    think, answer = m.groups()
    if any(tag in think or tag in answer for tag in _TAGS) or not answer.strip():
        return 0.0
    return 1.0


def answer_format(text: str) -> float:
    """Exactly one non-empty <answer> block, at the end; free text before it."""
    m = _ANSWER_RE.fullmatch(text)
    if not m:
        return 0.0
    before, answer = m.groups()
    if any(tag in before or tag in answer for tag in ("<answer>", "</answer>")) or not answer.strip():
        return 0.0
    return 1.0


_CODE_BLOCK_RE = re.compile(r"(.*?)```(?:python|py)[ \t]*\n(.*?)```\s*", re.DOTALL)


def code_block_format(text: str) -> float:
    """Exactly one fenced python block (```python or ```py), non-empty, at the end; free text
    before it without another fence."""
    m = _CODE_BLOCK_RE.fullmatch(text)
    if not m:
        return 0.0
    before, code = m.groups()
    return 1.0 if "```" not in before and "```" not in code and code.strip() else 0.0


def think_code_block_format(text: str) -> float:
    """One <think> block (no tags inside), then exactly one code block (`code_block_format`)."""
    m = re.fullmatch(r"\s*<think>(.*?)</think>(.*)", text, re.DOTALL)
    if not m or any(tag in m.group(1) for tag in _TAGS) or any(tag in m.group(2) for tag in _TAGS):
        return 0.0
    return code_block_format(m.group(2))


_CODE_FORMATS = {"code_block": code_block_format, "think_code_block": think_code_block_format}


def _load_schema(spec: str) -> dict[str, Any]:
    text = spec if spec.lstrip().startswith("{") else Path(spec).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"reward.format.json_schema: not valid JSON ({exc})") from None


def json_payload(text: str) -> str:
    """Where the JSON is: the <answer> block, else a ```json fence, else the whole text."""
    m = re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)
    if m:
        return m.group(1)
    m = _FENCE_RE.search(text)
    return m.group(1) if m else text


class FormatCheck:
    def __init__(self, cfg: FormatConfig) -> None:
        self.kind, self.code_kind = cfg.kind, cfg.code_kind
        self.pattern = re.compile(cfg.pattern, re.DOTALL) if cfg.pattern else None
        self.validator = None
        if cfg.kind == "json" and cfg.json_schema:
            import jsonschema  # only runs that check JSON pay for it

            schema = _load_schema(cfg.json_schema)
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            self.validator = cls(schema)

    def __call__(self, text: str, verifier: str = "math") -> float:
        """The format score of `text`, by the kind that fits the problem's verifier."""
        if verifier == "code" and self.code_kind != "same":
            return _CODE_FORMATS[self.code_kind](text) if self.code_kind != "none" else 1.0
        if self.kind == "think_answer":
            return think_answer_format(text)
        if self.kind == "answer":
            return answer_format(text)
        if self.kind == "regex":
            assert self.pattern is not None
            return 1.0 if self.pattern.fullmatch(text) else 0.0
        if self.kind == "json":
            try:
                data = json.loads(json_payload(text))
            except (json.JSONDecodeError, RecursionError):
                return 0.0
            if self.validator is None:
                return 1.0
            return 0.0 if next(iter(self.validator.iter_errors(data)), None) else 1.0
        return 1.0
