"""The shape of the package: no import cycles, every module importable on its own, no dead switches."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config

SRC = Path(__file__).resolve().parents[1] / "src"
MODULES = {}
for _path in sorted((SRC / "rlvr").rglob("*.py")):
    _name = ".".join(_path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
    MODULES[_name] = _path
# run as scripts inside the sandbox or as `python -m`, never imported by the package
SCRIPTS = {
    "rlvr.cli.__main__",
    "rlvr.sandbox._checker",
    "rlvr.sandbox._child",
    "rlvr.sandbox._harness",
    "rlvr.sandbox._program",
    "rlvr.sandbox._server",
}


def imports_of(name: str) -> set[str]:
    """rlvr modules `name` imports anywhere in its file (lazy, function-level imports included)."""
    out = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("rlvr"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in MODULES else node.module)
    return {m for m in out if m in MODULES and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# The floors of the package, bottom first: a package imports only packages on floors below its own.
# The configuration sits low, beside the models: it composes sections and imports no module it
# configures. rlvr.assembly, above the modules, the GRPO loop (rlvr.train) and the Ray machinery
# (rlvr.deploy: its actors take the parts the assembly gives them), builds every part from it and
# drives the run, embedded or on Ray; the CLI asks it.
FLOORS = [
    {"rlvr", "records", "configlib", "stats", "kernels", "runlog", "console", "harness", "algos", "plan"},
    {"configfiles", "urls", "scoring"},
    {"config", "models"},
    {"rewards", "sandbox", "checkpoint"},
    {"tools", "ops", "storage"},
    {"envs"},
    {"rollout", "tasks"},
    {"inference", "evaluate", "serve"},
    {"agents"},
    {"train"},
    {"deploy"},
    {"assembly"},
    {"sweep"},
    {"cli"},
    {"docgen"},
]


def package_imports() -> dict[str, set[str]]:
    """rlvr.<package> -> the rlvr packages its modules import (rlvr.train.step -> rlvr.train)."""
    top = {m: ".".join(m.split(".")[:2]) for m in MODULES}
    packages: dict[str, set[str]] = {}
    for m in MODULES:
        packages.setdefault(top[m], set()).update(top[d] for d in imports_of(m) if top[d] != top[m])
    return packages


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_between_modules_or_between_packages():
    assert cycles({m: imports_of(m) for m in MODULES}) == []
    assert cycles(package_imports()) == []


def test_every_package_imports_only_from_the_floors_below_it():
    floor = {f"rlvr.{name}" if name != "rlvr" else name: i for i, names in enumerate(FLOORS) for name in names}
    packages = package_imports()
    assert set(packages) - set(floor) == set(), "a new package: give it a floor in FLOORS"
    upward = sorted(
        f"{p} (floor {floor[p]}) imports {d} (floor {floor[d]})"
        for p, deps in packages.items()
        for d in deps
        if floor[d] >= floor[p]
    )
    assert upward == []


def test_every_module_imports():
    names = sorted(set(MODULES) - SCRIPTS)
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    done = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize(
    "override, key", [("rollout.engine=sglang", "rollout.engine"), ("rollout.backend=hf", "rollout.backend")]
)
def test_an_engine_that_is_not_built_is_a_config_error(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


def test_only_the_assembly_and_the_cli_hold_the_whole_config():
    """Every other module takes its own section (or plain values): none imports `Config`."""
    holders = ("rlvr.assembly", "rlvr.cli", "rlvr.config", "rlvr.docgen")
    found = sorted(
        name
        for name, path in MODULES.items()
        if not name.startswith(holders)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and node.module == "rlvr.config"
        and any(a.name == "Config" for a in node.names)
    )
    assert found == []
