"""Tools an agent calls in a multi-turn episode: typed Python functions, described by JSON schemas.

    tool = Tool.from_function(my_function)           # schema from the signature and docstring
    tools = resolve_tools(["calculator", "python", "mypkg.tools:lookup"], sandbox_cfg)
    calls = parse_tool_calls(text, "hermes")         # [ToolCall(name, arguments, error)]
    result = run_tool(tools, call, timeout_s=5)      # ToolResult(content, ok, error, timeout)

Built in: `calculator` (exact arithmetic on rationals, bounded sizes) and `python`
(the program runs in rlvr's sandbox, with its isolation, seccomp filter, limits and
concurrency bound; its stdout is the result). A user tool is any function with type
hints and a Google-style docstring, named by its import path ('module:function').
A tool that raises, times out, or is called with arguments it does not take answers
the model with an error message; the episode goes on.

A user tool runs in a worker process (rlvr.harness): one that does not answer within its
timeout is killed with everything it started, so it stops using the CPU the moment the model
is told it timed out; the next call gets a fresh worker (its module's import is not counted
against the call). The built-ins run here, bounded by their own limits: the calculator by the
size of its numbers, the `python` tool by a sandbox run killed at the call's deadline. Every
text a tool produces (its result, its error, a name echoed back) is cut before it is returned.
"""

from __future__ import annotations

import importlib
import inspect
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import Any

from rlvr.configlib import import_object
from rlvr.harness import CallFailed, Worker, safe_text
from rlvr.tools.calculator import calculator
from rlvr.tools.calls import MAX_CALLS, ToolCall, format_call, parse_tool_calls, read_json

TOOL_FORMATS = ("hermes", "compact")
MAX_RESULT_CHARS = 2000
"""A tool's answer is cut to this many characters (marked), so a chatty tool cannot flood the context."""
MAX_ERROR_CHARS = 500
"""An error message (a tool's exception, a bad call's name or arguments echoed back) is cut to this."""
LOAD_TIMEOUT_S = 120.0
"""A fresh worker's import of a tool's module (not counted against the call's timeout)."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments (an object)."""
    fn: Callable[..., Any] = field(compare=False, repr=False)
    host: Callable[["ToolCall", float], "ToolResult"] | None = field(default=None, compare=False, repr=False)
    """Where its calls run when not in this process (on Ray, a reward worker: `hosted`); None: here."""
    timed: Callable[[dict[str, Any], float], Any] | None = field(default=None, compare=False, repr=False)
    """A built-in that bounds its own calls: timed(arguments, timeout_s), run in this process. None: a
    user function, run in a worker process that is killed when it overruns."""

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> "Tool":
        """The schema from the signature and docstring (transformers' get_json_schema, the one chat
        templates read): every argument needs a type hint and a line in the docstring's Args."""
        from transformers.utils import get_json_schema

        schema = get_json_schema(fn)["function"]
        return cls(name or schema["name"], schema.get("description", ""), schema["parameters"], fn)

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style description chat templates take (`apply_chat_template(tools=...)`)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True)
class ToolResult:
    content: str
    ok: bool
    error: str | None = None
    timeout: bool = False


def _failed(msg: str, timeout: bool = False) -> ToolResult:
    msg = safe_text(msg, MAX_ERROR_CHARS)
    return ToolResult(f"error: {msg}", False, msg, timeout)


# --- running a call --------------------------------------------------------------------------


def run_tool(tools: dict[str, Tool], call: ToolCall, timeout_s: float) -> ToolResult:
    """Run one call; never raises. A positional compact argument goes to the tool's only parameter."""
    if call.error is not None:
        return _failed(call.error)
    tool = tools.get(call.name)
    if tool is None:
        return _failed(f"unknown tool {safe_text(call.name, 64)!r}; the tools are {', '.join(sorted(tools)) or 'none'}")
    if tool.host is not None:
        return tool.host(call, timeout_s)
    args = dict(call.arguments)
    if "" in args:  # compact call: the single argument of a one-parameter tool
        names = list(tool.parameters.get("properties", {}))
        if len(names) != 1:
            return _failed(f"{tool.name} takes {len(names)} arguments; call it in the hermes format")
        kind = tool.parameters["properties"][names[0]].get("type")
        try:  # the one argument, written as text, read as the type the tool declares
            value = {"integer": int, "number": float}.get(kind, str)(args.pop("").strip())
        except ValueError:
            return _failed(f"{tool.name} takes a {kind}")
        args = {names[0]: value}
    try:
        inspect.signature(tool.fn).bind(**args)
    except TypeError as exc:
        return _failed(str(exc))
    if tool.timed is None:
        return _in_worker(tool, args, timeout_s)
    box: dict[str, Any] = {}

    def call_here() -> None:
        try:
            box["text"] = _as_text(tool.timed(args, timeout_s))
        except BaseException as exc:  # noqa: BLE001 - a tool's own failure is the model's information
            box["error"] = exc

    # a daemon thread: the clock starts with the call, and a call that overruns holds neither a
    # worker the next call needs nor the interpreter's exit (the built-ins end theirs themselves)
    worker = threading.Thread(target=call_here, name=f"rlvr-tool-{tool.name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return _failed(f"{tool.name} did not answer within {timeout_s:g} s", timeout=True)
    if "error" in box:
        return _failed(f"{type(box['error']).__name__}: {safe_text(box['error'], MAX_ERROR_CHARS)}")
    return ToolResult(box["text"], True)


def _as_text(value: Any) -> str:
    """A tool's value as the text the model reads: a string as it is, anything else as JSON; cut."""
    return safe_text(value if isinstance(value, str) else json.dumps(value), MAX_RESULT_CHARS)


MAX_WORKERS = 8
"""User tool calls running at once (each in a worker process); more wait for a worker to be free."""


class _Workers:
    """Idle tool workers by the module they have imported; a worker that overran is killed, never reused.
    `slots` bounds how many run at once (memory: each is an interpreter)."""

    def __init__(self) -> None:
        self._idle: dict[str, list[Worker]] = {}
        self._lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_WORKERS)

    def take(self, module: str) -> Worker:
        with self._lock:
            idle = self._idle.get(module, [])
            while idle:
                worker = idle.pop()
                if not worker.dead:
                    return worker
        worker = Worker("tool")
        try:  # the import is the worker's start-up, not the call's time
            worker.submit(_load, module).result(LOAD_TIMEOUT_S)
        except (CallFailed, FutureTimeout):
            pass  # the call itself will say what is wrong
        return worker

    def give_back(self, module: str, worker: Worker) -> None:
        with self._lock:
            if not worker.dead:
                self._idle.setdefault(module, []).append(worker)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for workers in idle.values():
            for worker in workers:
                worker.kill()


WORKERS = _Workers()


def _load(module: str) -> None:
    try:
        importlib.import_module(module)
    except Exception:  # noqa: BLE001 - by-value functions (a notebook's, a test's) need no import
        pass


def _call(fn: Callable[..., Any], args: dict[str, Any]) -> str:
    return _as_text(fn(**args))


def _in_worker(tool: Tool, args: dict[str, Any], timeout_s: float) -> ToolResult:
    module = getattr(tool.fn, "__module__", None) or "__main__"
    with WORKERS.slots:  # the wait for a free worker is not the call's time (the step's deadline bounds it)
        worker = WORKERS.take(module)
        try:
            return _answer(worker.submit(_call, tool.fn, args), worker, tool, timeout_s)
        finally:
            WORKERS.give_back(module, worker)


def _answer(future, worker: Worker, tool: Tool, timeout_s: float) -> ToolResult:
    try:
        return ToolResult(future.result(timeout_s), True)
    except FutureTimeout:
        worker.kill()  # stops its CPU now, and whatever it started
        return _failed(f"{tool.name} did not answer within {timeout_s:g} s", timeout=True)
    except CallFailed as exc:
        if exc.kind in ("died", "killed"):
            return _failed(f"{tool.name} failed: {exc.message}")
        return _failed(str(exc))


# --- the registry ----------------------------------------------------------------------------


def python_tool(sandbox_cfg) -> Tool:
    """`python(code)`: the program runs in rlvr's sandbox; the result is its stdout (and the
    error when it fails). One sandbox per process, opened on first use; a run is killed at the
    call's deadline, and one still queued then never starts."""
    lock = threading.Lock()
    state: dict[str, Any] = {}

    def python(code: str) -> str:
        """Run a Python program in an isolated sandbox and return what it prints.

        Args:
            code: The program's source; print the values you need.
        """
        return timed({"code": code}, float(sandbox_cfg.timeout_s))

    def timed(args: dict[str, Any], timeout_s: float) -> str:
        with lock:
            if "pool" not in state:
                from rlvr.sandbox.verifier import CodeVerifier  # the python tool only (0.09 s -> 0.26 s at the top)

                state["pool"] = CodeVerifier(sandbox_cfg).pool  # probes isolation; refuses when required and missing
        future = state["pool"].submit(
            "program",
            args["code"],
            [{"stdin": ""}],  # reward.code's limits, or the call's
            case_timeout_s=min(timeout_s, float(sandbox_cfg.case_timeout_s)),
            total_timeout_s=min(timeout_s, float(sandbox_cfg.timeout_s)),
        )
        try:
            run = future.result(timeout_s)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"the program did not finish within {timeout_s:g} s") from None
        if not run.ok:
            raise RuntimeError(run.error or "the sandbox failed")
        case = run.cases[0]
        out = case.get("stdout", "")
        if case["status"] != "ok":
            return f"{out}\n[{case['status']}: {case.get('reason') or case.get('stderr', '')[-300:]}]".strip()
        return out.strip()

    return replace(Tool.from_function(python), timed=timed)


BUILTIN = {
    "calculator": lambda cfg: replace(Tool.from_function(calculator), timed=lambda args, _t: calculator(**args)),
    "python": python_tool,
}


def hosted(tools: dict[str, Tool], host: Callable[[ToolCall, float], ToolResult]) -> dict[str, Tool]:
    """The same tools (names, schemas), their calls run by `host(call, timeout_s)`, which runs
    `run_tool` where the tools live and never raises."""
    return {name: replace(tool, host=host) for name, tool in tools.items()}


def resolve_tools(names: Sequence[str], sandbox_cfg=None) -> dict[str, Tool]:
    """Tools by name: a built-in ('calculator', 'python') or an import path 'module:function'."""
    out: dict[str, Tool] = {}
    for name in names:
        if name in BUILTIN:
            tool = BUILTIN[name](sandbox_cfg)
        elif ":" in name:
            fn = import_object(name, "tool")
            tool = fn if isinstance(fn, Tool) else Tool.from_function(fn)
        else:
            raise ValueError(
                f"unknown tool {name!r}: built-ins are {', '.join(sorted(BUILTIN))}, or give "
                "'module:function' for a function of your own"
            )
        out[tool.name] = tool
    return out


__all__ = [
    "BUILTIN",
    "MAX_CALLS",
    "MAX_RESULT_CHARS",
    "TOOL_FORMATS",
    "WORKERS",
    "Tool",
    "ToolCall",
    "ToolResult",
    "format_call",
    "hosted",
    "parse_tool_calls",
    "python_tool",
    "read_json",
    "resolve_tools",
    "run_tool",
]
