"""Tools an agent calls: the calculator, call parsing, user tools, and model-written code run by the
`python` tool, contained exactly as a code reward is (the only network address used is a listener
this file opens on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time

import pytest

from rlvr.envs import ToolUse
from rlvr.records import Problem
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import EpisodeSpec, run_episodes
from rlvr.config.code import CodeConfig
from rlvr.rollout.tool_prompt import with_tools_described
from rlvr.tools import TOOL_FORMATS, ToolCall, parse_tool_calls, resolve_tools, run_tool
from rlvr.tools.calculator import calculator

UIDS = {"uid_base": 3_100_000_000 + (os.getpid() % 10_000) * 100_000, "uid_count": 100_000}
CFG = CodeConfig(case_timeout_s=2.0, timeout_s=6.0, memory_mb=256, max_processes=32, max_parallel=2, **UIDS)


def slow(seconds: float) -> str:
    """Sleep, then say so.

    Args:
        seconds: How long to sleep.
    """
    time.sleep(seconds)
    return "done"


def test_calculator_is_exact_and_bounded():
    assert calculator("482193*3951") == "1905144543" and calculator("854736/12") == "71228"
    assert calculator("1/8") == "0.125" and calculator("1/3") == "1/3" and calculator("2^10") == "1024"
    for bad, why in [
        ("__import__('os')", "only numbers"),
        ("10**5000", "digits"),
        ("2**100000", "at most 10000"),
        ("1/0", "division by zero"),
        ("1" * 300, "longer than"),
    ]:
        with pytest.raises((ValueError, ZeroDivisionError), match=why):
            calculator(bad)


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_a_template_without_tools_is_told_to_write_calls_as_they_are_read(fmt):
    """The tools described in the system message (a chat template that cannot take `tools`): a call
    written as the description says is read as that call in the run's env.tool_format, and the run's
    episodes render with that format."""
    from helpers import tool_chat_tokenizer

    from rlvr.assembly import episode_spec
    from rlvr.config import load_config
    from rlvr.rollout.episodes import Renderer
    from rlvr.rollout.tool_prompt import CALL_WORDS

    tools = list(resolve_tools(["calculator"]).values())
    spec = episode_spec(load_config(None, ["env.name=tools", "env.tools=[calculator]", f"env.tool_format={fmt}"]))
    assert spec.tool_format == fmt
    system = with_tools_described([{"role": "user", "content": "2*3="}], tools, spec.tool_format)[0]["content"]
    words = system.split("For each call write ")[1].split("</tool_call>")[0] + "</tool_call>"
    assert CALL_WORDS[fmt].startswith(words) and '"calculator"' in system  # and the schema
    filled = {"<name>": "calculator", "<argument>": "2*3", "<arguments as JSON>": '{"expression": "2*3"}'}
    if fmt == "hermes":
        filled["<name>"] = '"calculator"'
    for blank, value in filled.items():
        words = words.replace(blank, value)
    (call,) = parse_tool_calls(words, fmt)
    assert call.error is None and run_tool(resolve_tools(["calculator"]), call, 5.0).content == "6"
    if fmt == "compact":  # the tiny tokenizer (no braces) renders what it is told in full
        tok = tool_chat_tokenizer()
        shown = tok.decode(Renderer(tok, fmt).prompt([{"role": "user", "content": "2*3="}], tools))
        assert CALL_WORDS[fmt] in shown


def test_calls_are_read_in_both_formats_and_malformed_ones_answered_with_an_error():
    hermes = parse_tool_calls(
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>'
        "<tool_call>{not json}</tool_call>",
        "hermes",
    )
    assert hermes[0] == ToolCall("calculator", {"expression": "2*3"}) and "not valid JSON" in hermes[1].error
    compact = parse_tool_calls("<tool_call>calculator(2*3)</tool_call><tool_call>2*3</tool_call>", "compact")
    assert compact[0] == ToolCall("calculator", {"": "2*3"}) and compact[1].error
    tools = resolve_tools(["calculator", f"{__name__}:slow"])
    assert tools["slow"].parameters["properties"] == {
        "seconds": {"type": "number", "description": "How long to sleep."}
    }
    assert run_tool(tools, compact[0], 5).content == "6"
    assert run_tool(tools, ToolCall("calculator", {"expr": "1"}), 5).error  # an argument it does not take
    assert "unknown tool" in run_tool(tools, ToolCall("rm", {}), 5).content
    assert (
        run_tool(tools, ToolCall("calculator", {"expression": "1/0"}), 5).content
        == "error: ZeroDivisionError: division by zero"
    )
    timed = run_tool(tools, ToolCall("slow", {"seconds": 3}), 0.3)
    assert timed.timeout and "did not answer within 0.3 s" in timed.content


class Scripted:
    """A stand-in sampler that writes the same turn every time (the environment is under test here)."""

    def __init__(self, tok, text: str) -> None:
        self.tokenizer, self.version, self.ids = tok, 0, tok(text, add_special_tokens=False).input_ids

    def sample(self, contexts, params, group_size):
        return [
            (self.ids + [self.tokenizer.eos_token_id], [-0.5] * (len(self.ids) + 1), "stop")
            for _ in contexts
            for _ in range(group_size)
        ]


def test_a_tool_that_hangs_times_out_and_the_episodes_complete():
    from rlvr.models.tiny import build_tokenizer

    tok = build_tokenizer(code_chars=True, tool_tags=True)
    tools = resolve_tools([f"{__name__}:slow"])
    spec = EpisodeSpec(
        lambda p: ToolUse(tools=tools, tool_format="compact", tool_timeout_s=0.5), max_turns=2, max_tokens=200
    )
    t0 = time.time()
    out = run_episodes(
        Scripted(tok, "<tool_call>slow(30)</tool_call>"),
        [Problem(id="p", prompt="1+1=")],
        SamplingParams(group_size=2, max_new_tokens=40),
        spec,
    )
    assert time.time() - t0 < 10 and [c.finish_reason for c in out] == ["max_turns", "max_turns"]
    calls = out[0].turns[0].info["tool_calls"]
    assert calls[0]["timeout"] and not calls[0]["ok"] and "did not answer" in tok.decode(out[0].token_ids)


@pytest.mark.skipif(sys.platform != "linux", reason="the sandbox needs Linux namespaces")
def test_hostile_python_tool_calls_are_contained(tmp_path):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    secret = tmp_path / "secret.txt"
    secret.write_text("host-only-secret")
    os.chmod(tmp_path, 0o755)
    tools = resolve_tools(["python"], CFG)
    env = ToolUse(tools=tools, tool_format="hermes", tool_timeout_s=60)

    def call(code: str) -> str:
        result = env.step("<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>")
        return result.messages[0]["content"]

    try:
        net = call(
            "import socket\ns = socket.socket()\ns.settimeout(0.5)\n"
            f"try:\n    s.connect(('127.0.0.1', {port}))\n    print('connected')\nexcept OSError as e:\n    print('blocked')\n"
        )
        assert "connected" not in net
        with pytest.raises(socket.timeout):
            listener.accept()
        read = call(f"try:\n    print(open({str(secret)!r}).read())\nexcept OSError:\n    print('no file')\n")
        assert "host-only-secret" not in read
        bomb = call("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
        assert "error" in bomb or "timeout" in bomb or "killed" in bomb
        assert call("print(6 * 7)") == "42"  # and the tool still works
    finally:
        listener.close()
