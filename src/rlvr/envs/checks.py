"""Calls into an environment, contained and checked where its answers enter.

    outcome = open_env(envs, key, factory, problem, seed, limits)   # construct + reset
    outcome = step_env(envs, key, text, limits)
    outcome = close_env(envs, key)

Each returns plain data (it may have crossed a process boundary: rlvr.envs.host): what the
environment said, checked and cut to size, or {"fault": {...}} saying which method failed, how
('raised', 'exit', 'bad_result') and why. Nothing an environment does (raise anything, SystemExit
included; return a tuple, None, a NaN, a numpy array, a message of 10 MB) escapes as an exception.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from typing import Any

from rlvr.envs import Environment, StepResult, schemas
from rlvr.harness import safe_text

ERROR_CHARS = 2000
INFO_CHARS = 262_144
"""An episode's `info`, as JSON, at most this long (it is kept with every sample)."""
ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Limits:
    message_chars: int = 16_384
    """Characters of one message an environment sends; longer ones are cut (marked) before tokenising."""


class _Wrong(Exception):
    """An environment answered with the wrong shape (the message says what to return instead)."""


def fault(method: str, kind: str, type_name: str, message: str) -> dict[str, Any]:
    return {"fault": {"method": method, "kind": kind, "type": type_name, "message": safe_text(message, ERROR_CHARS)}}


def _raised(method: str, exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, _Wrong):
        return fault(method, "bad_result", "", str(exc))
    kind = "exit" if isinstance(exc, SystemExit) else "raised"
    return fault(method, kind, type(exc).__name__, safe_text(exc, ERROR_CHARS))


def open_env(envs: dict[int, Environment], key: int, factory, problem, seed: int, limits: Limits) -> dict[str, Any]:
    """Construct the episode's environment and reset it: its first messages (or text prompt), the
    tools it offers (as schemas), its class name and whether it is multi-turn."""
    try:
        env = factory(problem)
    except BaseException as exc:  # noqa: BLE001 - anything user code raises, SystemExit too
        return _raised("__init__", exc)
    if not isinstance(env, Environment):
        return fault(
            "__init__",
            "bad_result",
            "",
            f"the environment factory made a {type(env).__name__}, not an rlvr.envs.Environment",
        )
    envs[key] = env
    name = type(env).__name__
    try:
        first = _first(name, env.reset(problem, seed), limits)
        tools = json.loads(json.dumps(schemas(env.tools)))
        return {"class": name, "first": first, "tools": tools, "multi_turn": bool(env.multi_turn)}
    except BaseException as exc:  # noqa: BLE001
        return _raised("reset", exc) | {"class": name}


def env_name(factory) -> str:
    """What to call an episode's environment before it answers: its class (episode_spec's factories
    say it), or the factory's own name."""
    if isinstance(factory, type):
        return factory.__name__
    return getattr(factory, "env_name", None) or getattr(factory, "__qualname__", "environment")


def step_env(envs: dict[int, Environment], key: int, text: str, limits: Limits) -> dict[str, Any]:
    env = envs.get(key)
    if env is None:
        return fault("step", "killed", "", "the environment was abandoned after it overran")
    try:
        return step_result(type(env).__name__, env.step(text), limits)
    except BaseException as exc:  # noqa: BLE001
        return _raised("step", exc)


def close_env(envs: dict[int, Environment], key: int) -> dict[str, Any]:
    env = envs.pop(key, None)
    try:
        if env is not None:
            env.close()
        return {}
    except BaseException as exc:  # noqa: BLE001
        return _raised("close", exc)


def _first(name: str, first: Any, limits: Limits) -> list[dict[str, Any]] | str:
    if isinstance(first, str):
        return safe_text(first, limits.message_chars)
    if isinstance(first, list):
        return _messages(f"{name}.reset", first, limits)
    raise _Wrong(
        f"{name}.reset returned a {type(first).__name__}; return the first messages (a list of "
        "{'role', 'content'} dicts) or a text prompt (str)"
    )


def step_result(name: str, result: Any, limits: Limits) -> dict[str, Any]:
    """A StepResult as plain data, every field checked: messages a list of role/content dicts (or
    None), components finite numbers, done a bool, info a dict of JSON-able values."""
    where = f"{name}.step"
    if not isinstance(result, StepResult):
        got = "None" if result is None else f"a {type(result).__name__}"
        hint = " (a gymnasium 5-tuple is not a step of a text episode)" if isinstance(result, tuple) else ""
        raise _Wrong(f"{where} returned {got}{hint}; return rlvr.envs.StepResult(messages, components, done, info)")
    messages = None if result.messages is None else _messages(where, result.messages, limits)
    if not isinstance(result.components, dict):
        raise _Wrong(f"{where}: components is a {type(result.components).__name__}; it is a dict name -> number")
    components = {}
    for cname, value in result.components.items():
        if not isinstance(cname, str) or isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _Wrong(
                f"{where}: component {safe_text(cname, 64)!r} is {safe_text(repr(value), 64)}; components "
                "are str -> finite number"
            )
        if not math.isfinite(float(value)):
            raise _Wrong(f"{where}: component {cname!r} is {float(value)}; components are finite numbers")
        components[cname] = float(value)
    return {
        "messages": messages,
        "components": components,
        "done": _bool(where, result.done),
        "info": _info(where, result.info),
    }


def _bool(where: str, done: Any) -> bool:
    if isinstance(done, bool):
        return done
    if getattr(done, "shape", None) == () and getattr(getattr(done, "dtype", None), "kind", "") == "b":
        return bool(done)  # a numpy bool scalar
    raise _Wrong(f"{where}: done is {safe_text(repr(done), 64)} ({type(done).__name__}); it is a bool")


def _messages(where: str, messages: Any, limits: Limits) -> list[dict[str, Any]]:
    if not isinstance(messages, list):
        raise _Wrong(
            f"{where}: messages is a {type(messages).__name__}; it is a list of {{'role', 'content'}} dicts (or None)"
        )
    out = []
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise _Wrong(
                f"{where}: messages[{k}] is {safe_text(repr(m), 80)}; a message is {{'role': one of "
                f"{', '.join(ROLES)}, 'content': str}}"
            )
        out.append(
            {
                str(k2): safe_text(v, limits.message_chars)
                for k2, v in m.items()
                if k2 in ("role", "content", "name", "tool_call_id")
            }
        )
    return out


def _info(where: str, info: Any) -> dict[str, Any]:
    if not isinstance(info, dict):
        raise _Wrong(f"{where}: info is {safe_text(repr(info), 64)}; it is a dict (empty when there is nothing)")
    if "return" in info:
        value = info["return"]
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            raise _Wrong(
                f"{where}: info['return'] is {safe_text(repr(value), 64)}; the episode's return is a finite number"
            )
    try:
        text = json.dumps(info, default=_plain, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _Wrong(f"{where}: info cannot be recorded as JSON ({safe_text(exc, 200)})") from None
    if len(text) > INFO_CHARS:
        raise _Wrong(f"{where}: info is {len(text)} characters as JSON; at most {INFO_CHARS}")
    return json.loads(text)


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as numbers and lists; anything else is not recordable."""
    if hasattr(value, "tolist") and callable(value.tolist):
        return value.tolist()
    raise TypeError(f"a {type(value).__name__} is not JSON")
