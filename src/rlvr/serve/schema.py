"""Request pieces both APIs share: models that refuse unknown fields, and a text content part."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A request model that answers an unknown field with a 400 naming it (never ignores it)."""

    model_config = ConfigDict(extra="forbid")


class TextPart(Strict):
    """{"type": "text", "text": ...}: OpenAI's content part, Anthropic's text block."""

    type: Literal["text"]
    text: str
