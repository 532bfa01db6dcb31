"""Request pieces the APIs share: models that refuse unknown fields, models of a message's parts that
ignore what clients echo back, and a text content part."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A request model that answers an unknown field with a 400 naming it (never ignores it)."""

    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    """A message or a part of one. Clients send back what they were given, and more
    (`reasoning_content`, `refusal`, `annotations`, `cache_control`, `citations`, `index`, ...):
    such fields do not change what the model reads and are ignored, never a 400. What would change
    it is declared where it can appear (a legacy `function_call`, `audio`) and refused."""

    model_config = ConfigDict(extra="ignore")


class TextPart(Lenient):
    """{"type": "text", "text": ...}: OpenAI's content part, Anthropic's text block."""

    type: Literal["text"]
    text: str
