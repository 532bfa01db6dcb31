"""The docs site: generated reference pages up to date, every config key and command documented, a
short README whose links resolve. `make test` builds the site itself with `mkdocs build --strict`."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from rlvr import docgen
from rlvr.config import Config

ROOT = Path(__file__).resolve().parents[1]


def leaf_keys(cls: type, prefix: str = "") -> set[str]:
    """Every dotted key a config file can set, found by walking the dataclasses (not through docgen)."""
    hints = typing.get_type_hints(cls)
    names = {field: key for key, field in getattr(cls, "KEY_ALIASES", {}).items()}
    keys = set()
    for f in dataclasses.fields(cls):
        key = prefix + names.get(f.name, f.name)
        tp = hints[f.name]
        args = typing.get_args(tp)
        if dataclasses.is_dataclass(tp):
            keys |= leaf_keys(tp, key + ".")
        elif typing.get_origin(tp) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
            keys |= leaf_keys(args[1], f"{key}.<name>.")  # one section per entry: deploy.pools.<name>.cpus
        else:
            keys.add(key)
    return keys


@pytest.mark.parametrize("rel", sorted(docgen.pages()))
def test_generated_reference_is_up_to_date(rel):
    committed = (ROOT / rel).read_text(encoding="utf-8") if (ROOT / rel).exists() else ""
    assert committed == docgen.pages()[rel], f"{rel} is out of date: run `python -m rlvr.docgen`"


def test_config_reference_covers_every_key():
    page = (ROOT / docgen.CONFIG_PAGE).read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([^`]+)` \|", page, flags=re.MULTILINE))
    keys = leaf_keys(Config)
    assert len(keys) > 200
    assert keys - documented == set(), "keys missing from the config reference"
    assert "deploy.async" in keys and "deploy.pools.<name>.replicas" in keys


def test_config_reference_carries_the_field_docs():
    page = (ROOT / docgen.CONFIG_PAGE).read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `rollout.group_size` |"))
    assert "| integer | `8` | G: completions sampled per prompt. |" in row
    row = next(line for line in page.splitlines() if line.startswith("| `algo.loss_type` |"))
    assert "`token_mean`" in row and "DAPO" in row


def test_cli_reference_covers_every_command():
    page = (ROOT / docgen.CLI_PAGE).read_text(encoding="utf-8")
    paths = [" ".join(path) for path, _, _ in docgen.commands()]
    from rlvr.cli import COMMANDS

    assert {f"rlvr {c}" for c in COMMANDS} <= set(paths)
    assert {"rlvr reward score", "rlvr data audit", "rlvr sandbox run", "rlvr sandbox check"} <= set(paths)
    for path in paths:
        assert re.search(rf"^#+ {re.escape(path)}$", page, flags=re.MULTILINE), (
            f"{path} has no section in {docgen.CLI_PAGE}"
        )
    for option in ("--config FILE", "--samples N", "--model-b B", "--repeat REPEAT"):
        assert f"`{option}`" in page


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; details belong in docs/"
    text = "\n".join(lines)
    assert "make train" in text and "make test" in text and "make docs" in text


def test_readme_relative_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"[a-z]+:|#", link)]
    assert relative, "the README links into docs/"
    missing = [link for link in relative if not (ROOT / link.split("#", 1)[0]).exists()]
    assert missing == [], f"README.md links to files that do not exist: {missing}"
