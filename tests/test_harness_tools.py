"""Tools and tool calls written to hurt: user tools that spin, raise floods, return odd objects or
exit; tool-call text that is unclosed, deep, huge or not text. Each costs the model an error message
and nothing more; each case bounded in time from outside."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_harness import bounded

from rlvr.serve.tools import split_calls
from rlvr.tools import MAX_CALLS, WORKERS, ToolCall, parse_tool_calls, resolve_tools, run_tool

TOOLS = resolve_tools([f"hostile:{name}" for name in ("spin", "shout", "odd", "leave", "garble")])


def tree_cpu_s() -> float:
    """CPU seconds used so far by this process and every process under it."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def tool_workers() -> list[psutil.Process]:
    """The live harness workers under this process (an exited child not reaped yet uses nothing)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "rlvr.harness.worker" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def test_timed_out_cpu_bound_calls_leave_nothing_running():
    WORKERS.close()
    threads, workers = threading.active_count(), {p.pid for p in tool_workers()}  # earlier tests' hosts aside
    for _ in range(20):
        result = bounded(30, run_tool, TOOLS, ToolCall("spin", {"n": 1}), 0.1)
        assert result.timeout and "did not answer within 0.1 s" in result.content
    time.sleep(0.1 + 1.0)  # the timeout plus 1 s
    before = tree_cpu_s()
    time.sleep(1.0)
    assert tree_cpu_s() - before < 0.2  # back to idle: nothing spins on (20 spinning threads would use a core)
    assert {p.pid for p in tool_workers()} <= workers and threading.active_count() <= threads


def test_raising_odd_exiting_and_garbling_tools_answer_with_bounded_errors():
    shout = bounded(30, run_tool, TOOLS, ToolCall("shout", {"n": 100}), 10)
    assert not shout.ok and shout.content.startswith("error: ValueError: AAA") and len(shout.content) < 1100
    odd = bounded(30, run_tool, TOOLS, ToolCall("odd", {"n": 1}), 10)
    assert not odd.ok and "not JSON serializable" in odd.content
    quits = bounded(30, run_tool, TOOLS, ToolCall("leave", {"n": -2}), 10)
    assert not quits.ok and "SystemExit" in quits.content
    dies = bounded(30, run_tool, TOOLS, ToolCall("leave", {"n": 5}), 10)
    assert not dies.ok and "exited with code 5" in dies.content
    garbled = bounded(30, run_tool, TOOLS, ToolCall("garble", {"n": 10_000}), 10)
    assert garbled.ok and "\udc80" not in garbled.content and len(garbled.content) < 2100
    garbled.content.encode("utf-8")  # what a tokenizer takes
    unknown = run_tool(TOOLS, ToolCall("x" * 1_000_000, {}), 10)
    assert "unknown tool" in unknown.content and len(unknown.content) < 600
    assert (
        "did not answer" not in bounded(30, run_tool, TOOLS, ToolCall("garble", {"n": 1}), 10).content
    )  # still serving
    WORKERS.close()


def test_the_parser_is_linear_and_never_raises():
    unclosed = bounded(5, parse_tool_calls, "<tool_call>" * 30_000, "hermes")  # 330 KB: 66 s when quadratic
    assert len(unclosed) == 1 and "cut" in unclosed[0].error
    assert bounded(5, split_calls, "<tool_call>" * 30_000, {"f"}) == ("<tool_call>" * 30_000, [])  # serving's reader
    deep = parse_tool_calls(
        '<tool_call>{"name": "f", "arguments": {"a": ' + "[" * 5_000 + "]" * 5_000 + "}}</tool_call>", "hermes"
    )
    assert "nested" in deep[0].error
    huge = parse_tool_calls('<tool_call>{"name": "f", "arguments": {"a": ' + "9" * 10_000 + "}}</tool_call>", "hermes")
    assert "digits" in huge[0].error
    many = parse_tool_calls('<tool_call>{"name": "f", "arguments": {}}</tool_call>' * 20, "hermes")
    assert len(many) == MAX_CALLS + 1 and "more than" in many[-1].error
    last = parse_tool_calls(
        '<tool_call>{"name": "f", "arguments": {}}</tool_call> then <tool_call>{"name": "g"', "hermes"
    )
    assert last[0] == ToolCall("f", {}) and "was cut" in last[1].error  # not taken for the final answer
    surrogate = parse_tool_calls('<tool_call>{"name": "f", "arguments": {"a": "\\udc80"}}</tool_call>', "hermes")
    assert surrogate[0].error is None


FRAGMENTS = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        "[",
        "]",
        '"',
        "\\",
        ":",
        ",",
        "name",
        "arguments",
        '"name"',
        '"f"',
        "9" * 80,
        "\udc80",
        " ",
        "(",
        ")",
        "f",
        "null",
        "1e999",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(FRAGMENTS, max_size=60), st.sampled_from(["hermes", "compact"]))
def test_the_parser_is_total_on_any_text(parts, fmt):
    calls = parse_tool_calls("".join(parts), fmt)
    assert len(calls) <= MAX_CALLS + 1
    assert all(isinstance(c, ToolCall) and (c.error is None or isinstance(c.error, str)) for c in calls)


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="the sandbox needs Linux namespaces")
def test_the_python_tools_sandbox_run_ends_at_the_calls_deadline():
    from test_agents_tools import CFG

    tools = resolve_tools(
        ["python"], CFG.__class__(**{**CFG.__dict__, "max_parallel": 1, "timeout_s": 20.0, "case_timeout_s": 20.0})
    )
    t0 = time.monotonic()
    spun = bounded(30, run_tool, tools, ToolCall("python", {"code": "while True:\n    pass\n"}), 1.0)
    assert not spun.ok and time.monotonic() - t0 < 10
    t1 = time.monotonic()  # the one sandbox slot is free again: the next program runs at once
    assert bounded(30, run_tool, tools, ToolCall("python", {"code": "print(6 * 7)"}), 10.0).content == "42"
    assert time.monotonic() - t1 < 8
