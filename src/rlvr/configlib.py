"""Typed configuration: dataclasses built from plain data (YAML files and dotted overrides, stacked
by rlvr.configfiles).

Each concern owns one dataclass; `Config` nests them. Loading validates every
key and value before anything runs, and errors name the dotted key together
with what is allowed, e.g.

    rollout.group_size: expected an integer, got 'oops'
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import types
import typing
from typing import Any, Literal, get_args, get_origin

import yaml


class ConfigError(ValueError):
    """A config value or key is wrong; the message names the key."""


class RunFailed(RuntimeError):
    """The run cannot go on; the message says why, in one line, and what to do (the CLI prints it and
    exits 1, after the run directory's summary says status=failed)."""


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is bool:
        return "true or false"
    if tp is str:
        return "a string"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`, converting where lossless."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, key)
            except ConfigError as exc:
                errors.append(str(exc).split(": ", 1)[-1])
        raise ConfigError(
            f"{key}: expected {' or '.join(_type_name(o) for o in options if o is not type(None))}"
            f"{' or null' if type(None) in options else ''}, got {value!r}"
        )
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of settings, got {value!r}")
        return from_dict(tp, value, prefix=key)
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}") from None
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "5e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (item_tp, *_) = get_args(tp) or (Any,)
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        k_tp, v_tp = get_args(tp) or (Any, Any)
        return {_coerce(k, k_tp, key): _coerce(v, v_tp, f"{key}.{k}") for k, v in value.items()}
    return value


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass `cls` from a (possibly partial) dict, validating every key."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    aliases = getattr(cls, "KEY_ALIASES", {})  # config key -> field, for keys that are Python keywords
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        name = aliases.get(name, name)
        if name not in fields:
            allowed = ", ".join(sorted(fields))
            where = f"'{prefix}'" if prefix else "the top level"
            raise ConfigError(f"{_leaf_key(key, value)}: unknown key '{name}'; keys allowed at {where}: {allowed}")
        kwargs[name] = _coerce(value, hints[name], key)
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        # a section's __post_init__ raises "field: what is wrong"; name the full key
        raise ConfigError(f"{prefix}.{exc}" if prefix else str(exc)) from None
    return obj


def require(ok: bool, key: str, message: str) -> None:
    """Raise ConfigError('key: message') unless ok. In a section's __post_init__ `key` is the field's
    name (from_dict names the full key); elsewhere, the full key."""
    if not ok:
        raise ConfigError(f"{key}: {message}")


def _leaf_key(key: str, value: Any) -> str:
    """The full dotted key a user wrote (`no.such.key=1` arrives as {'no': {'such': {'key': 1}}})."""
    while isinstance(value, dict) and len(value) == 1:
        ((name, value),) = value.items()
        key = f"{key}.{name}"
    return key


def to_dict(obj: Any) -> Any:
    """Plain-data view of a config (enums as values), for YAML and hashing."""
    if dataclasses.is_dataclass(obj):
        keys = {field: key for key, field in getattr(obj, "KEY_ALIASES", {}).items()}
        return {keys.get(f.name, f.name): to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"{item}: overrides are written key=value, e.g. rollout.group_size=8")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"{item}: empty key in override; write e.g. train.lr=1e-5")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def import_object(path: str, what: str) -> Any:
    """The object 'module:name' names (a user's environment class, tool function, ...), or a
    ValueError that says which setting (`what`) could not be imported and why."""
    import importlib

    module, _, attr = path.partition(":")
    try:
        if module.endswith(".py"):  # a file of your own: 'agents/my_agent.py:solve'
            return getattr(_import_file(module), attr)
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"{what} {path!r}: cannot import it ({exc})") from None
    except (Exception, SystemExit) as exc:  # the module's own code failed (or exited) on import
        raise ValueError(f"{what} {path!r}: importing it raised {type(exc).__name__}: {exc}") from None


_FILE_LOCK = threading.Lock()


def _import_file(path: str):
    """The module of a Python file, loaded once per process under a name of its own (what 'file.py:name'
    names); threads that ask at once wait for the one loading it."""
    import importlib.util
    import pathlib
    import sys
    import zlib

    file = pathlib.Path(path).resolve()
    name = f"rlvr_file_{file.stem}_{zlib.crc32(str(file).encode()):08x}"
    with _FILE_LOCK:
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, file)
            if spec is None or not file.is_file():
                raise ImportError(f"no Python file {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # before it runs, as for any import (dataclasses look it up)
            try:
                spec.loader.exec_module(module)  # type: ignore[union-attr]
            except BaseException:
                del sys.modules[name]
                raise
        return sys.modules[name]
