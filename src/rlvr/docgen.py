"""The generated reference pages of the docs site: every config key and every CLI command.

`python -m rlvr.docgen` writes docs/reference/config.md and docs/reference/cli.md; `tests/test_docs.py`
checks that the committed pages equal what this module generates now.

- Config keys come from the `Config` dataclass tree: one table per section, each field with its
  dotted key, type, default and doc. The doc is the string literal written under the field (the
  convention of every section, see CONTRIBUTING.md), read from the class's source with `ast`; a
  section's own docstring introduces its table.
- Commands come from the argparse parsers of `rlvr.cli`, built as `rlvr` builds them, sub-commands of
  sub-commands (`rlvr reward score`) included. Usage lines are rendered here rather than by argparse,
  whose layout depends on the terminal width and the Python version.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import functools
import importlib
import inspect
import itertools
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from rlvr.cli import COMMANDS
from rlvr.config import Config
from rlvr.configlib import to_dict

CONFIG_PAGE = "docs/reference/config.md"
CLI_PAGE = "docs/reference/cli.md"
COMMAND = "python -m rlvr.docgen"
MAP_KEY = "<name>"  # stands for the key of a mapping of sections (deploy.pools.<name>.cpus)


# ---------------------------------------------------------------------------------------------- config


@dataclasses.dataclass
class Key:
    key: str  # dotted, as written in YAML and overrides
    type: str
    default: str
    doc: str


@dataclasses.dataclass
class Section:
    key: str  # dotted prefix; '' for the top level
    doc: str
    keys: list[Key]


def field_docs(cls: type) -> dict[str, str]:
    """The string literal under each field of dataclass `cls` (attribute docstrings), by field name."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    (node,) = ast.parse(source).body
    docs: dict[str, str] = {}
    body = node.body if isinstance(node, ast.ClassDef) else []
    for stmt, following in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[stmt.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _mapped_section(tp: Any) -> type | None:
    """The section type of a `dict[str, Section]` field, else None."""
    if get_origin(tp) is dict and len(get_args(tp)) == 2 and dataclasses.is_dataclass(get_args(tp)[1]):
        return get_args(tp)[1]
    return None


def type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(_code(_yaml(a)) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(_code(_yaml(m.value)) for m in tp)
    if origin is list:
        return f"list of {type_name(get_args(tp)[0])}" if get_args(tp) else "list"
    if origin is dict:
        if not get_args(tp):
            return "mapping"
        k, v = get_args(tp)
        return f"mapping of {type_name(k)} to {'section' if dataclasses.is_dataclass(v) else type_name(v)}"
    if tp is Any:
        return "any"
    return {int: "integer", float: "number", bool: "boolean", str: "string"}.get(tp, getattr(tp, "__name__", str(tp)))


def _yaml(value: Any) -> str:
    """A value as it is written in a config file."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000, allow_unicode=True).strip()
    return text.removesuffix("\n...").strip()


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return to_dict(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return to_dict(f.default_factory())
    return dataclasses.MISSING


def config_sections(root: type | None = None) -> list[Section]:
    """The reference of every key under `root` (default: rlvr.config.Config), one Section per dataclass."""
    root = root or Config
    sections: dict[str, Section] = {}

    def walk(cls: type, prefix: str, intro: str) -> None:
        hints = typing.get_type_hints(cls)
        docs = field_docs(cls)
        aliases = {field: key for key, field in getattr(cls, "KEY_ALIASES", {}).items()}
        section = sections.setdefault(prefix, Section(prefix, intro, []))
        for f in dataclasses.fields(cls):
            key = f"{prefix}.{aliases.get(f.name, f.name)}" if prefix else aliases.get(f.name, f.name)
            tp, doc = hints[f.name], docs.get(f.name, "")
            if dataclasses.is_dataclass(tp):
                walk(tp, key, _join(doc, inspect.cleandoc(tp.__doc__ or "") if _own_doc(tp) else ""))
            elif (inner := _mapped_section(tp)) is not None:
                names = ", ".join(str(k) for k in (_default(f) or {}))
                where = f" (`{MAP_KEY}`: {names})" if names else ""
                default = f"one section each for {names} (below)" if names else "`{}`"
                section.keys.append(Key(key, type_name(tp), default, doc))
                walk(
                    inner,
                    f"{key}.{MAP_KEY}",
                    _join(
                        f"One section per entry of `{key}`{where}.",
                        inspect.cleandoc(inner.__doc__ or "") if _own_doc(inner) else "",
                    ),
                )
            else:
                section.keys.append(Key(key, type_name(tp), _cell_default(_default(f)), doc))

    walk(root, "", "")
    return [s for s in sections.values() if s.keys]


def _own_doc(cls: type) -> bool:
    """A docstring the class wrote itself, not the signature dataclasses makes up."""
    return bool(cls.__doc__) and not cls.__doc__.startswith(cls.__name__ + "(")


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _cell_default(value: Any) -> str:
    if value is dataclasses.MISSING:
        return "(required)"
    return _code(_yaml(value))


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(text: str) -> str:
    """Prose for a table cell, on one line. Code spans (a run of one or two backticks up to the next
    run of the same length) are kept as they are: a '|' inside one is text to Python-Markdown. Outside
    them '&', '<', '>' and '|' are escaped, and so is every other backtick: a docstring's ```python
    means the characters, not a code span."""
    text = " ".join(text.split())
    out, i = [], 0
    while i < len(text):
        if text[i] == "`":
            j = i
            while j < len(text) and text[j] == "`":
                j += 1
            close = re.compile(f"(?<!`)`{{{j - i}}}(?!`)").search(text, j) if j - i < 3 else None
            if close:
                out.append(text[i : close.end()])
                i = close.end()
            else:
                out.append("\\`" * (j - i))
                i = j
            continue
        out.append({"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|"}.get(text[i], text[i]))
        i += 1
    return "".join(out)


def config_markdown(root: type | None = None) -> str:
    lines = [
        "# Configuration keys",
        "",
        f"Generated by `{COMMAND}` from the config dataclasses (do not edit by hand): every key, its",
        "type, its default and the doc written under its field in the source. How files, profiles and",
        "`key=value` overrides combine is in [Configuration](../guides/configuration.md).",
        "",
    ]
    sections = config_sections(root)
    for section in sections:
        title = f"`{section.key}`" if section.key else "Top level"
        lines += [f"## {title}", ""]
        if section.doc:
            lines += [_cell(section.doc), ""]
        lines += ["| key | type | default | doc |", "|---|---|---|---|"]
        for k in section.keys:
            lines.append(f"| `{k.key}` | {_cell(k.type)} | {k.default} | {_cell(k.doc)} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


# ------------------------------------------------------------------------------------------------ CLI


def cli_parser() -> argparse.ArgumentParser:
    """The `rlvr` parser with every sub-command's arguments (rlvr.cli.main adds only the one it runs)."""
    parser = argparse.ArgumentParser(prog="rlvr", description="Reinforcement learning from verifiable rewards.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for cmd, help_text in COMMANDS.items():
        p = sub.add_parser(cmd, help=help_text, description=help_text)
        importlib.import_module(f"rlvr.cli.{cmd}").add_arguments(p)
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            out += [(name, helps.get(name, ""), p) for name, p in action.choices.items()]
    return out


def commands(
    parser: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ("rlvr",)
) -> list[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """(command path, help, parser) of every sub-command, depth first: ('rlvr', 'reward', 'score'), ..."""
    parser = parser or cli_parser()
    out = []
    for name, help_text, p in _subcommands(parser):
        out.append(((*path, name), help_text, p))
        out += commands(p, (*path, name))
    return out


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest if not action.option_strings else action.dest.upper()


def _with_args(action: argparse.Action) -> str:
    m, n = _metavar(action), action.nargs
    if n == 0:
        return ""
    return {
        None: m,
        "?": f"[{m}]",
        "*": f"[{m} ...]",
        "+": f"{m} [{m} ...]",
        argparse.REMAINDER: "...",
        argparse.PARSER: f"{m} ...",
    }.get(n, " ".join([m] * n) if isinstance(n, int) else m)


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.help is not argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]


def usage(path: tuple[str, ...], parser: argparse.ArgumentParser) -> str:
    parts = [" ".join(path)]
    for a in _arguments(parser):
        if isinstance(a, argparse._SubParsersAction):
            parts.append(_metavar(a) + " ...")
        elif a.option_strings:
            form = f"{a.option_strings[0]} {_with_args(a)}".strip()
            parts.append(form if a.required else f"[{form}]")
        else:
            parts.append(_with_args(a))
    return " ".join(parts)


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        params["prog"] = prog
        for key in ("choices",):
            if params.get(key) is not None:
                params[key] = ", ".join(map(str, params[key]))
        text = text % params
    return text


def _default_text(action: argparse.Action) -> str:
    d = action.default
    if (
        action.nargs == 0
        or d is None
        or d is argparse.SUPPRESS
        or d == []
        or isinstance(action, argparse._SubParsersAction)
    ):
        return ""  # a flag, or nothing given
    return _code(" ".join(map(str, d)) if isinstance(d, (list, tuple)) else str(d))


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    parser = parser or cli_parser()
    lines = [
        "# Commands",
        "",
        f"Generated by `{COMMAND}` from the argparse parsers of `rlvr.cli` (do not edit by hand): every",
        "command and sub-command with its arguments; `rlvr COMMAND --help` prints the same. `KEY=VALUE`",
        "overrides are the [configuration keys](config.md).",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    entries = commands(parser)
    for path, help_text, _ in entries:
        lines.append(f"| [`{' '.join(path)}`](#{_anchor(path)}) | {_cell(help_text)} |")
    lines.append("")
    for path, help_text, p in entries:
        level = "#" * min(len(path), 4)
        lines += [f"{level} {' '.join(path)}", ""]
        description = p.description or help_text
        for paragraph in re.split(r"\n\s*\n", inspect.cleandoc(description or "")):
            if paragraph.strip():
                lines += [_cell(paragraph), ""]
        lines += ["```text", usage(path, p), "```", ""]
        rows = []
        for a in _arguments(p):
            if isinstance(a, argparse._SubParsersAction):
                continue
            name = (
                ", ".join(f"`{o} {_with_args(a)}`".replace(" `", "`") for o in a.option_strings)
                if a.option_strings
                else f"`{_with_args(a)}`"
            )
            rows.append(f"| {name} | {_default_text(a)} | {_cell(_help(a, ' '.join(path)))} |")
        if rows:
            lines += ["| argument | default | what |", "|---|---|---|", *rows, ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _anchor(path: tuple[str, ...]) -> str:
    """The id Python-Markdown's toc gives the heading `rlvr reward score`."""
    return "-".join(path)


# ----------------------------------------------------------------------------------------------- main


@functools.cache
def pages() -> dict[str, str]:
    """Repository-relative path -> content of every generated page."""
    return {CONFIG_PAGE: config_markdown(), CLI_PAGE: cli_markdown()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Write the generated reference pages of the docs site.")
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parents[2],
        help="repository root (default: the checkout this module is in)",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs")
    args = parser.parse_args(argv)
    stale = []
    for rel, text in pages().items():
        path = args.root / rel
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(rel)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {rel}")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run `{COMMAND}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
