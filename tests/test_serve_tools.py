"""`rlvr serve` with tools, through the real openai and anthropic SDKs (127.0.0.1 only): tool
definitions and earlier calls and results reach the prompt; the model's `<tool_call>` text comes back
as OpenAI tool_calls and Anthropic tool_use blocks, streamed or not. The model is a scripted backend
that says what the test wants (the conversion is under test, not a model's wits)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

from test_serve import KEY, Running  # noqa: E402

from rlvr.config import load_config  # noqa: E402
from rlvr.rewards import build_reward  # noqa: E402
from rlvr.serve.app import Arm, Server  # noqa: E402

TEMPLATE = (
    "{% if tools %}tools:{{ tools | map(attribute='function') | map(attribute='name') | join(',') }}\n{% endif %}"
    "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}\n{% endfor %}assistant:"
)
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "482193*39"}}</tool_call>'
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Exact arithmetic.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def byte_tokenizer():
    """A byte-level tokenizer built here (no hub): any text, one byte a token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {bytes_char: i for i, bytes_char in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    vocab["<eos>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


class Scripted:
    """A backend that answers every prompt with `self.say` (or, while `self.script` holds replies, the
    next of them), and keeps the prompts it was given."""

    context_len = 4096

    def __init__(self, tok) -> None:
        self.tok, self.say, self.prompts, self.script = tok, "", [], []
        self.eos_ids = frozenset({tok.eos_token_id})

    async def stream(self, prompt_ids, params):
        self.prompts.append(self.tok.decode(prompt_ids))
        if self.script:
            self.say = self.script.pop(0)
        ids = self.tok(self.say, add_special_tokens=False).input_ids + [self.tok.eos_token_id]
        for i in range(0, len(ids), 4):
            yield ids[i : i + 4]

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def served():
    tok = byte_tokenizer()
    backend = Scripted(tok)
    cfg = load_config(None, [f"serve.api_keys=[{KEY}]", "serve.model_name=tiny"])
    running = Running(
        Server([Arm("a", "tiny", tok, backend, TEMPLATE, 256)], cfg.serve, reward=build_reward(cfg.reward))
    )
    yield running, backend
    running.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_openai_tools_in_tool_calls_out(served, stream):
    running, backend = served
    backend.say = "Let me compute." + CALL
    client = running.openai()
    messages = [{"role": "user", "content": "482193*39?"}]
    if stream:
        chunks = list(client.chat.completions.create(model="tiny", messages=messages, tools=WEATHER, stream=True))
        calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Let me compute."
        name, args, call_id = calls[0].function.name, calls[0].function.arguments, calls[0].id
    else:
        out = client.chat.completions.create(model="tiny", messages=messages, tools=WEATHER)
        msg = out.choices[0].message
        assert out.choices[0].finish_reason == "tool_calls" and msg.content == "Let me compute."
        name, args, call_id = (
            msg.tool_calls[0].function.name,
            msg.tool_calls[0].function.arguments,
            msg.tool_calls[0].id,
        )
    assert name == "calculator" and json.loads(args) == {"expression": "482193*39"}
    assert backend.prompts[-1].startswith("tools:calculator\nuser:482193*39?")
    # the call and its result go back in: rendered as the model wrote and read them
    backend.say = "It is 18805527."
    out = client.chat.completions.create(
        model="tiny",
        tools=WEATHER,
        messages=messages
        + [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}],
            },
            {"role": "tool", "tool_call_id": call_id, "content": "18805527"},
        ],
    )
    assert out.choices[0].message.content == "It is 18805527." and out.choices[0].finish_reason == "stop"
    assert not out.choices[0].message.tool_calls
    assert backend.prompts[-1].endswith(f"assistant:{CALL}\ntool:18805527\nassistant:")


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tools_in_tool_use_out(served, stream):
    running, backend = served
    backend.say = CALL
    client = running.anthropic()
    tools = [
        {"name": "calculator", "description": "Exact arithmetic.", "input_schema": WEATHER[0]["function"]["parameters"]}
    ]
    messages = [{"role": "user", "content": "482193*39?"}]
    if stream:
        with client.messages.stream(model="tiny", max_tokens=200, messages=messages, tools=tools) as s:
            msg = s.get_final_message()
    else:
        msg = client.messages.create(model="tiny", max_tokens=200, messages=messages, tools=tools)
    assert msg.stop_reason == "tool_use"
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert use.name == "calculator" and use.input == {"expression": "482193*39"}
    backend.say = "It is 18805527."
    out = client.messages.create(
        model="tiny",
        max_tokens=200,
        tools=tools,
        messages=messages
        + [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18805527"}]},
        ],
    )
    assert out.stop_reason == "end_turn" and out.content[0].text == "It is 18805527."
    assert backend.prompts[-1].endswith(f"assistant:{CALL}\ntool:18805527\nassistant:")


def test_tool_choice_none_offers_no_tools_and_reads_no_calls(served):
    running, backend = served
    backend.say = CALL
    out = running.openai().chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], tools=WEATHER, tool_choice="none"
    )
    assert out.choices[0].message.content == CALL and not out.choices[0].message.tool_calls
    assert not backend.prompts[-1].startswith("tools:")
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        running.openai().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], tools=WEATHER, tool_choice="required"
        )


FLAT = [{"type": "function", **WEATHER[0]["function"]}]  # the Responses API's tool shape


@pytest.mark.parametrize("stream", [False, True])
def test_responses_function_calls_and_previous_response_id(served, stream):
    """client.responses.create and .stream: the call comes back as a function_call item; its output
    continues the stored response; the same turn replayed as items renders the same prompt."""
    running, backend = served
    client = running.openai()
    backend.say = "Let me compute." + CALL
    ask = {"model": "tiny", "tools": FLAT, "instructions": "Be exact."}
    if stream:
        with client.responses.stream(input="482193*39?", **ask) as events:
            kinds = [e.type for e in events]
            first = events.get_final_response()
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert "response.output_text.delta" in kinds and "response.function_call_arguments.done" in kinds
    else:
        first = client.responses.create(input="482193*39?", **ask)
    assert first.status == "completed" and first.output_text == "Let me compute."
    (call,) = [i for i in first.output if i.type == "function_call"]
    assert call.name == "calculator" and json.loads(call.arguments) == {"expression": "482193*39"}
    assert backend.prompts[-1].startswith("tools:calculator\nsystem:Be exact.\nuser:482193*39?\nassistant:")
    backend.say = "It is 18805527."
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "18805527"}
    second = client.responses.create(input=[result], previous_response_id=first.id, **ask)
    assert second.output_text == "It is 18805527." and second.previous_response_id == first.id
    assert backend.prompts[-1].endswith(f"assistant:Let me compute.{CALL}\ntool:18805527\nassistant:")
    replayed = [{"role": "user", "content": "482193*39?"}, *[i.model_dump() for i in first.output], result]
    client.responses.create(input=replayed, store=False, **ask)
    assert backend.prompts[-1] == backend.prompts[-2]


@pytest.mark.parametrize("streamed", [False, True])
def test_an_openai_agents_sdk_agent_runs_its_tool_loop_against_rlvr_serve(served, streamed):
    """The OpenAI Agents SDK (openai-agents, Responses by default), unmodified: its function tool is
    called with the model's arguments, the result goes back in, and the final answer comes out."""
    import asyncio

    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    running, backend = served
    set_tracing_disabled(True)  # no traces sent anywhere
    asked = []

    @function_tool
    def calculator(expression: str) -> str:
        """Exact arithmetic."""
        asked.append(expression)
        return "18805527"

    client = openai.AsyncOpenAI(base_url=f"{running.url}/v1", api_key=KEY, max_retries=0)
    model = OpenAIResponsesModel(model="tiny", openai_client=client)
    agent = Agent(name="calc", instructions="Be exact.", tools=[calculator], model=model)
    backend.script = ["Let me compute." + CALL, "It is 18805527."]

    async def run():
        if not streamed:
            return (await Runner.run(agent, "482193*39?")).final_output
        result = Runner.run_streamed(agent, "482193*39?")
        async for _ in result.stream_events():
            pass
        return result.final_output

    assert asyncio.run(run()) == "It is 18805527." and asked == ["482193*39"]
    assert backend.prompts[-1].startswith("tools:calculator\nsystem:Be exact.\nuser:482193*39?\n")
    assert backend.prompts[-1].endswith(f"assistant:Let me compute.{CALL}\ntool:18805527\nassistant:")


def test_fields_clients_echo_back_are_ignored(served):
    """What real clients send on earlier messages (verifiers' reasoning_content, the SDK's refusal,
    annotations, audio) is no 400; a legacy function_call, which would drop a call, is."""
    import httpx

    running, backend = served
    backend.say = "fine"
    echoed = {"role": "assistant", "content": "4", "reasoning_content": None, "refusal": None, "annotations": []}
    messages = [
        {"role": "user", "content": "2+2", "name": "ann"},
        {**echoed, "audio": None},
        {"role": "user", "content": "ok"},
    ]
    out = running.openai().chat.completions.create(model="tiny", messages=messages)
    assert out.choices[0].message.content == "fine" and backend.prompts[-1].endswith("assistant:4\nuser:ok\nassistant:")
    legacy = {**echoed, "function_call": {"name": "calculator", "arguments": "{}"}}
    r = httpx.post(
        f"{running.url}/v1/chat/completions",
        json={"model": "tiny", "messages": [messages[0], legacy]},
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert r.status_code == 400 and "function_call" in r.json()["error"]["message"]


def test_malformed_responses_traffic_is_a_4xx_and_the_server_keeps_serving(served):
    import httpx

    running, backend = served
    backend.say = "ok"
    first = running.openai().responses.create(model="tiny", input="hi", store=False)

    def call(args: str) -> list[dict]:
        return [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "calculator", "arguments": args},
        ]

    bad = {
        "unknown item type": {"input": [{"type": "computer_call", "id": "x", "action": {}}]},
        "unknown call id": {"input": [{"type": "function_call_output", "call_id": "call_nope", "output": "1"}]},
        "a result before its call": {
            "input": [
                {"type": "function_call_output", "call_id": "c1", "output": "1"},
                {"type": "function_call", "call_id": "c1", "name": "calculator", "arguments": "{}"},
            ]
        },
        "deep arguments": {"input": call('{"a": ' + "[" * 5000 + "]" * 5000 + "}")},
        "huge integer": {"input": call('{"a": ' + "9" * 10_000 + "}")},
        "not an object": {"input": call("[1, 2]")},
        "no input": {"input": []},
        "unknown previous response": {"input": "hi", "previous_response_id": "resp_nope"},
        "a response not stored": {"input": "hi", "previous_response_id": first.id},
        "a hosted tool": {"input": "hi", "tools": [{"type": "web_search"}]},
        "a forced tool": {"input": "hi", "tools": FLAT, "tool_choice": "required"},
        "structured output": {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}},
        "something included": {"input": "hi", "include": ["reasoning.encrypted_content"]},
        "background": {"input": "hi", "background": True},
        "deep input": {"input": "hi", "metadata": "DEEP"},
    }
    for what, fields in bad.items():
        body = json.dumps({"model": "tiny", **fields}).replace('"DEEP"', "[" * 100_000 + "]" * 100_000)
        r = httpx.post(
            f"{running.url}/v1/responses", content=body, headers={"authorization": f"Bearer {KEY}"}, timeout=30
        )
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", (what, r.text[:300])
    assert running.openai().responses.create(model="tiny", input="hi").output_text == "ok"


def test_malformed_tool_traffic_is_a_4xx_and_the_server_keeps_serving(served):
    """Each answer a JSON error body in the API's own shape, never a 500."""
    import httpx

    running, backend = served
    backend.say = "<tool_call>" * 10  # unclosed calls from the model stay text
    client = running.openai()
    user = [{"role": "user", "content": "hi"}]
    out = client.chat.completions.create(model="tiny", messages=user, tools=WEATHER)
    assert out.choices[0].message.content == backend.say and not out.choices[0].message.tool_calls

    def call(args: str) -> dict:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": args}}],
        }

    bad = {
        "deep arguments": [*user, call('{"a": ' + "[" * 5000 + "]" * 5000 + "}")],
        "huge integer": [*user, call('{"a": ' + "9" * 10_000 + "}")],
        "not an object": [*user, call("[1, 2]")],
        "unknown call id": [*user, call("{}"), {"role": "tool", "tool_call_id": "call_nope", "content": "1"}],
        "lone surrogate": [{"role": "user", "content": "bad \udc80"}],
    }
    headers = {"authorization": f"Bearer {KEY}"}
    for what, messages in bad.items():
        body = json.dumps({"model": "tiny", "messages": messages, "tools": WEATHER})  # \udc80 escaped, as JSON allows
        r = httpx.post(f"{running.url}/v1/chat/completions", content=body, headers=headers, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", (what, r.text[:300])
    anthropic_bad = {
        "unknown tool_use_id": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}]}
        ],
        "huge integer input": [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "calculator", "input": {"a": "HUGE"}}],
            }
        ],
        "deep input": [{"role": "user", "content": "x"}],
    }
    for what, messages in anthropic_bad.items():
        body = json.dumps({"model": "tiny", "max_tokens": 10, "messages": messages})
        body = body.replace('"HUGE"', "9" * 10_000)
        if what == "deep input":
            body = body[:-1] + ', "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"
        r = httpx.post(f"{running.url}/v1/messages", content=body, headers={"x-api-key": KEY}, timeout=30)
        assert 400 <= r.status_code < 500 and r.json()["type"] == "error", (what, r.status_code, r.text[:300])
    backend.say = "still here"
    assert client.chat.completions.create(model="tiny", messages=user).choices[0].message.content == "still here"


def test_a_recorded_session_with_feedback_becomes_sft_data_and_preference_pairs(tmp_path):
    """serve --record keeps each response with its tokens; /v1/feedback scores one or prefers another;
    `rlvr data recording` turns both into what `rlvr sft --data` and `rlvr rm train` read."""
    import httpx

    from rlvr.cli import main
    from rlvr.serve.record import Recorder
    from rlvr.tasks.files import read_records
    from rlvr.train.rm import load_pairs

    tok = byte_tokenizer()
    backend = Scripted(tok)
    cfg = load_config(None, [f"serve.api_keys=[{KEY}]", "serve.model_name=tiny"])
    server = Server(
        [Arm("a", "tiny", tok, backend, TEMPLATE, 256)],
        cfg.serve,
        reward=build_reward(cfg.reward),
        recorder=Recorder(tmp_path / "rec"),
    )
    running = Running(server)
    try:
        ask = [{"role": "user", "content": "482193*39?"}]
        backend.say = "It is 18805527."
        good = running.openai().chat.completions.create(model="tiny", messages=ask)
        backend.say = "It is 5."
        bad = running.openai().chat.completions.create(model="tiny", messages=ask, stream=True)
        bad_id = [c.id for c in bad][0]
        backend.say = "Paris, I think."
        claude = running.anthropic().messages.create(
            model="tiny", max_tokens=50, messages=[{"role": "user", "content": "Capital of France?"}]
        )

        def feedback(body: dict) -> httpx.Response:
            return httpx.post(
                f"{running.url}/v1/feedback",
                content=json.dumps(body),  # NaN as JSON allows it
                headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
            )

        assert feedback({"response_id": good.id, "score": 1.0}).status_code == 200
        assert feedback({"response_id": bad_id, "score": 0.0}).status_code == 200
        assert feedback({"response_id": claude.id, "preferred": "Paris."}).status_code == 200
        assert feedback({"response_id": "chatcmpl-nope", "score": 1}).status_code == 404
        assert feedback({"response_id": good.id}).status_code == 400
        assert feedback({"response_id": good.id, "score": float("nan")}).status_code == 400
    finally:
        running.stop()
    served = [json.loads(line) for line in (tmp_path / "rec" / "served.jsonl").read_text().splitlines()]
    assert [r["id"] for r in served] == [good.id, bad_id, claude.id]
    assert all(tok.decode(r["completion_ids"]).startswith(r["text"]) for r in served)  # its tokens, kept
    assert served[0]["conversation"] == [{"role": "user", "content": "482193*39?"}]
    sft, pairs = tmp_path / "sft.jsonl", tmp_path / "pairs.jsonl"
    assert main(["data", "recording", str(tmp_path / "rec"), "--sft", str(sft), "--pairs", str(pairs)]) == 0
    records = [p for _, p, err in read_records([sft]) if p is not None]
    assert sorted(r.solution for r in records) == ["It is 18805527.", "Paris."]
    loaded = load_pairs(pairs)
    assert sorted((p.chosen, p.rejected) for p in loaded) == [
        ("It is 18805527.", "It is 5."),
        ("Paris.", "Paris, I think."),
    ]
