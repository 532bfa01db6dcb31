"""Text from user code, made bounded and encodable before anything tokenises or sends it."""

from __future__ import annotations


def safe_text(value: object, limit: int) -> str:
    """`value` as text of at most `limit` characters (a marked cut), lone surrogates replaced: what
    a tokenizer, a JSON encoder and a UTF-8 socket all accept. Never raises (an object whose str()
    raises becomes a note saying so)."""
    if not isinstance(value, str):
        try:
            value = str(value)
        except BaseException as exc:  # noqa: BLE001 - a hostile __str__ costs its own text only
            value = f"<unprintable {type(value).__name__}: str() raised {type(exc).__name__}>"
    return clip(value, limit).encode("utf-8", "replace").decode("utf-8")


def clip(text: str, limit: int) -> str:
    """At most `limit` characters; a longer text keeps its head and says how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"
