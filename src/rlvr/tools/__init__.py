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
"""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rlvr.tools.calculator import calculator

TOOL_FORMATS = ("hermes", "compact")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments (an object)."""
    fn: Callable[..., Any] = field(compare=False, repr=False)
    host: Callable[["ToolCall", float], "ToolResult"] | None = field(default=None, compare=False, repr=False)
    """Where its calls run when not in this process (on Ray, a reward worker: `hosted`); None: here."""

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> "Tool":
        """The schema from the signature and docstring (transformers' get_json_schema, the one chat
        templates read): every argument needs a type hint and a line in the docstring's Args."""
        from transformers.utils import get_json_schema

        schema = get_json_schema(fn)["function"]
        return cls(name or schema["name"], schema.get("description", ""), schema["parameters"], fn)

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style description chat templates take (`apply_chat_template(tools=...)`)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    error: str | None = None
    """Why the call could not be read (malformed JSON, no name): answered with this message."""


@dataclass(frozen=True)
class ToolResult:
    content: str
    ok: bool
    error: str | None = None
    timeout: bool = False


# --- calls in the model's text --------------------------------------------------------------

_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_COMPACT_RE = re.compile(r"\s*([A-Za-z_][\w.-]*)\((.*)\)\s*", re.DOTALL)
MAX_CALLS = 8
"""Tool calls read from one assistant turn; more are answered with an error."""


def parse_tool_calls(text: str, fmt: str) -> list[ToolCall]:
    """Every `<tool_call>...</tool_call>` block of an assistant turn. 'hermes' (Hermes/Qwen, what chat
    templates with tools use): a JSON object {"name": ..., "arguments": {...}}; 'compact' (small
    character-level models): `name(argument)`, the one string argument of a one-parameter tool."""
    out: list[ToolCall] = []
    for body in _CALL_RE.findall(text)[:MAX_CALLS + 1]:
        if len(out) == MAX_CALLS:
            out.append(ToolCall("", {}, f"more than {MAX_CALLS} tool calls in one turn"))
            break
        out.append(_hermes(body) if fmt == "hermes" else _compact(body))
    return out


def _hermes(body: str) -> ToolCall:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return ToolCall("", {}, f"the tool call is not valid JSON ({exc.msg} at column {exc.colno})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall("", {}, 'a tool call is a JSON object {"name": ..., "arguments": {...}}')
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return ToolCall(obj["name"], {}, "the arguments are not a JSON object")
    if not isinstance(args, dict):
        return ToolCall(obj["name"], {}, "the arguments are not a JSON object")
    return ToolCall(obj["name"], args)


def _compact(body: str) -> ToolCall:
    m = _COMPACT_RE.fullmatch(body)
    if m is None:
        return ToolCall("", {}, "a tool call is name(argument)")
    return ToolCall(m.group(1), {"": m.group(2)})


def format_call(call: ToolCall, fmt: str) -> str:
    """The text of a call as the model writes it (cold-start demonstrations, serving)."""
    if fmt == "compact":
        return f"<tool_call>{call.name}({next(iter(call.arguments.values()), '')})</tool_call>"
    return "<tool_call>" + json.dumps({"name": call.name, "arguments": call.arguments}) + "</tool_call>"


# --- running a call --------------------------------------------------------------------------

MAX_RESULT_CHARS = 2000
"""A tool's answer is cut to this many characters (marked), so a chatty tool cannot flood the context."""


def run_tool(tools: dict[str, Tool], call: ToolCall, timeout_s: float) -> ToolResult:
    """Run one call; never raises. A positional compact argument goes to the tool's only parameter."""
    if call.error is not None:
        return ToolResult(f"error: {call.error}", False, call.error)
    tool = tools.get(call.name)
    if tool is None:
        msg = f"unknown tool {call.name!r}; the tools are {', '.join(sorted(tools)) or 'none'}"
        return ToolResult(f"error: {msg}", False, msg)
    if tool.host is not None:
        return tool.host(call, timeout_s)
    args = dict(call.arguments)
    if "" in args:  # compact call: the single argument of a one-parameter tool
        names = list(tool.parameters.get("properties", {}))
        if len(names) != 1:
            msg = f"{tool.name} takes {len(names)} arguments; call it in the hermes format"
            return ToolResult(f"error: {msg}", False, msg)
        kind = tool.parameters["properties"][names[0]].get("type")
        try:  # the one argument, written as text, read as the type the tool declares
            value = {"integer": int, "number": float}.get(kind, str)(args.pop("").strip())
        except ValueError:
            msg = f"{tool.name} takes a {kind}"
            return ToolResult(f"error: {msg}", False, msg)
        args = {names[0]: value}
    try:
        inspect.signature(tool.fn).bind(**args)
    except TypeError as exc:
        return ToolResult(f"error: {exc}", False, str(exc))
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            value = tool.fn(**args)
            box["value"] = value if isinstance(value, str) else json.dumps(value)
        except BaseException as exc:  # noqa: BLE001 - a tool's own failure is the model's information
            box["error"] = exc

    # a daemon thread per call: the clock starts with the call, and a tool that never returns
    # holds no worker the next call needs, nor the interpreter's exit
    worker = threading.Thread(target=call, name=f"rlvr-tool-{tool.name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        msg = f"{tool.name} did not answer within {timeout_s:g} s"
        return ToolResult(f"error: {msg}", False, msg, timeout=True)
    if "error" in box:
        exc = box["error"]
        msg = f"{type(exc).__name__}: {exc}"
        return ToolResult(f"error: {msg}", False, msg)
    text = box["value"]
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[... {len(text) - MAX_RESULT_CHARS} more characters cut]"
    return ToolResult(text, True)


# --- the registry ----------------------------------------------------------------------------

def python_tool(sandbox_cfg) -> Tool:
    """`python(code)`: the program runs in rlvr's sandbox; the result is its stdout (and the
    error when it fails). One sandbox per process, opened on first use."""
    lock = threading.Lock()
    state: dict[str, Any] = {}

    def python(code: str) -> str:
        """Run a Python program in an isolated sandbox and return what it prints.

        Args:
            code: The program's source; print the values you need.
        """
        with lock:
            if "pool" not in state:
                from rlvr.sandbox.verifier import CodeVerifier
                state["pool"] = CodeVerifier(sandbox_cfg).pool  # probes isolation; refuses when required and missing
        run = state["pool"].submit("program", code, [{"stdin": ""}]).result()
        if not run.ok:
            raise RuntimeError(run.error or "the sandbox failed")
        case = run.cases[0]
        out = case.get("stdout", "")
        if case["status"] != "ok":
            return f"{out}\n[{case['status']}: {case.get('reason') or case.get('stderr', '')[-300:]}]".strip()
        return out.strip()

    return Tool.from_function(python)


BUILTIN = {"calculator": lambda cfg: Tool.from_function(calculator), "python": python_tool}


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
            from rlvr.configlib import import_object

            fn = import_object(name, "tool")
            tool = fn if isinstance(fn, Tool) else Tool.from_function(fn)
        else:
            raise ValueError(f"unknown tool {name!r}: built-ins are {', '.join(sorted(BUILTIN))}, or give "
                             "'module:function' for a function of your own")
        out[tool.name] = tool
    return out
