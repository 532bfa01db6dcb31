"""Layered configuration: config files stacked in order, includes, profiles, and values taken from
the environment, each key's origin recorded.

    layers = read_layers(["configs/base.yaml", "my.yaml"], ["train.lr=1e-5"], profile="prod")
    layers.data      # the merged mapping, ready for configlib.from_dict
    layers.origins   # {"train.lr": "override", "rollout.group_size": "my.yaml", ...}
    layers.secrets   # keys whose value came from ${secret:VAR}: redacted wherever the config is written

Order, later wins: each `--config` file in turn (a file's `include:` list first, relative to the
file, then the file itself), then the profile (`--profile NAME` or $RLVR_PROFILE: the `profiles:
NAME` section of the files, else `profiles/NAME.yaml` beside the first file or
`configs/profiles/NAME.yaml`), then the `key=value` overrides. A string value `${env:VAR}` or
`${env:VAR,default}` is the variable's value (read as YAML when it is the whole value, so
`${env:STEPS}` can be a number); `${secret:VAR}` the same, and its key is a secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.configlib import ConfigError, parse_override

INCLUDE_KEYS = ("include", "defaults")
PROFILE_VAR = "RLVR_PROFILE"
_REF_RE = re.compile(r"\$\{(env|secret):([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")


@dataclass
class Layers:
    data: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    profiles: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    """name -> (section, the file it came from): every `profiles:` section read."""
    exclusive: dict[str, str] = field(default_factory=dict)
    """key -> the key it excludes: a layer that sets one drops the other as an earlier layer set it."""


def read_layers(
    paths: Sequence[str | Path],
    overrides: Sequence[str] = (),
    *,
    profile: str | None = None,
    environ: Mapping[str, str] | None = None,
    exclusive: Sequence[tuple[str, str]] = (),
) -> Layers:
    """`exclusive`: pairs of keys of which a config sets one (`env.agent`, `env.agent_command`): the
    later layer's wins, so an override of one replaces the other set in a file."""
    environ = os.environ if environ is None else environ
    layers = Layers(exclusive={a: b for pair in exclusive for a, b in (pair, pair[::-1])})
    for path in paths:
        _read_file(Path(path), layers, ())
    name = profile or environ.get(PROFILE_VAR) or None
    if name:
        _apply_profile(name, [Path(p) for p in paths], layers)
    for item in overrides:
        keys, value = parse_override(item)
        _merge_leaf(layers, keys, value, "override")
    for key, value in leaves(layers.data):
        if value == REDACTED:
            raise ConfigError(
                f"{key}: the file has {REDACTED} here (a run's config.yaml keeps no secrets): "
                f"set it again, e.g. {key}=${{secret:VAR}} with VAR in the environment"
            )
    _interpolate(layers.data, "", layers, environ)
    return layers


# --- secrets -------------------------------------------------------------------------------------

SECRET_NAME_RE = re.compile(r"^(?:webhook_url|api_keys?|(?:\w+_)?(?:token|password|secret))$")
"""Keys that hold secrets by their name (alerts.webhook_url, serve.api_keys, ...)."""
REDACTED = "<secret>"
MISSING = object()


def leaves(data: dict[str, Any], prefix: str = ""):
    """(dotted key, value) of every entry, sections included, depth first."""
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from leaves(v, key + ".")
        yield key, v


def lookup(data: dict[str, Any], key: str, default: Any = MISSING) -> Any:
    node = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def redacted(data: dict[str, Any], listed: Sequence[str]) -> dict[str, Any]:
    """`data` (plain config data, changed in place) with every secret that is set written as <secret>:
    keys named like one, and the `listed` ones (`secrets`, with those set from ${secret:VAR})."""
    named = [k for k, _ in leaves(data) if SECRET_NAME_RE.search(k.rsplit(".", 1)[-1])]
    for key in dict.fromkeys([*named, *listed]):
        if lookup(data, key, None) not in (None, "", [], {}):
            *parents, leaf = key.split(".")
            node = data
            for part in parents:
                node = node[part]
            node[leaf] = REDACTED
    return data


def _load_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of config sections at the top level")
    return loaded or {}


def _read_file(path: Path, layers: Layers, stack: tuple[Path, ...]) -> None:
    """`path`'s includes, then its own keys, merged into `layers`; its profiles collected."""
    real = path.resolve()
    if real in stack:
        chain = " -> ".join(str(p) for p in (*stack, real))
        raise ConfigError(f"{path}: includes itself ({chain})")
    data = _load_yaml(path)
    for key in INCLUDE_KEYS:
        included = data.pop(key, None)
        if included is None:
            continue
        if isinstance(included, str):
            included = [included]
        if not isinstance(included, list) or not all(isinstance(i, str) for i in included):
            raise ConfigError(f"{path}: {key}: expected a list of config files, got {included!r}")
        for item in included:
            _read_file(path.parent / item, layers, (*stack, real))
    profiles = data.pop("profiles", None)
    if profiles is not None:
        if not isinstance(profiles, dict) or not all(isinstance(v, dict) for v in profiles.values()):
            raise ConfigError(f"{path}: profiles: expected a mapping of profile names to config sections")
        for name, section in profiles.items():
            merged, _ = layers.profiles.get(str(name), ({}, ""))
            layers.profiles[str(name)] = (_deep_merge(merged, section), str(path))
    _merge(layers, data, [], str(path))


def _apply_profile(name: str, paths: list[Path], layers: Layers) -> None:
    if name in layers.profiles:
        section, source = layers.profiles[name]
        _merge(layers, section, [], f"profile {name} ({source})")
        return
    candidates = list(
        dict.fromkeys(
            ([paths[0].parent / "profiles" / f"{name}.yaml"] if paths else [])
            + [Path("configs") / "profiles" / f"{name}.yaml"]
        )
    )
    for candidate in candidates:
        if candidate.is_file():
            before = len(layers.profiles)
            _read_file(candidate, layers, ())
            if len(layers.profiles) != before:
                raise ConfigError(f"{candidate}: a profile file cannot define profiles of its own")
            for key, origin in layers.origins.items():
                if origin == str(candidate):
                    layers.origins[key] = f"profile {name} ({candidate})"
            return
    known = ", ".join(sorted(layers.profiles)) or "none"
    raise ConfigError(
        f"profile {name!r} (--profile or ${PROFILE_VAR}): no `profiles: {name}` section in the config "
        f"files (their profiles: {known}) and no file {' or '.join(str(c) for c in candidates)}"
    )


def _deep_merge(dst: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    out = dict(dst)
    for k, v in src.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _merge(layers: Layers, data: dict[str, Any], prefix: list[str], origin: str) -> None:
    for k, v in data.items():
        keys = [*prefix, str(k)]
        if isinstance(v, dict) and v:
            _merge(layers, v, keys, origin)
        else:
            _merge_leaf(layers, keys, v, origin)


def _merge_leaf(layers: Layers, keys: list[str], value: Any, origin: str) -> None:
    node = layers.data
    for i, part in enumerate(keys[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(
                f"{'.'.join(keys[: i + 1])}: is a value, not a section; cannot set {'.'.join(keys)} (from {origin})"
            )
        node = child
    node[keys[-1]] = value
    dotted = ".".join(keys)
    other = layers.exclusive.get(dotted)
    if other is not None and layers.origins.get(other, origin) != origin:  # set by an earlier layer
        *parents, leaf = other.split(".")
        section = lookup(layers.data, ".".join(parents), {}) if parents else layers.data
        section.pop(leaf, None)
        del layers.origins[other]
    for key in [k for k in layers.origins if k.startswith(dotted + ".")]:
        del layers.origins[key]  # a section replaced by a value
    layers.origins[dotted] = origin


def _interpolate(node: Any, key: str, layers: Layers, environ: Mapping[str, str]) -> Any:
    """Replace ${env:VAR} / ${secret:VAR} references in every string value, in place."""
    if isinstance(node, dict):
        for k in list(node):
            node[k] = _interpolate(node[k], f"{key}.{k}" if key else str(k), layers, environ)
        return node
    if isinstance(node, list):
        return [_interpolate(v, f"{key}[{i}]", layers, environ) for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node
    secret = False

    def value(m: re.Match) -> str:
        nonlocal secret
        kind, var, default = m.groups()
        secret = secret or kind == "secret"
        if var in environ:
            return environ[var]
        if default is not None:
            return default
        raise ConfigError(
            f"{key}: environment variable {var} is not set (set it, or give a default: ${{{kind}:{var},DEFAULT}})"
        )

    whole = _REF_RE.fullmatch(node)
    out: Any = _REF_RE.sub(value, node)
    if secret:
        layers.secrets.append(key.split("[")[0])
    elif whole is not None:  # the whole value: read as YAML (numbers, booleans); a secret stays text
        try:
            out = yaml.safe_load(out) if out != "" else ""
        except yaml.YAMLError:
            pass
    return out
