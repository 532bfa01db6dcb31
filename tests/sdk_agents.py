"""Agent programs as users write them: the OpenAI or Anthropic SDK, no rlvr import. The turns follow
what the `chatty` test model learnt (a few digits, then `ok` and a newline from the other side)."""

from __future__ import annotations

import anthropic
import openai

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "note",
            "description": "Keep a note.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        },
    }
]


def chat(base_url, model, problem):
    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    messages = [{"role": "user", "content": problem["prompt"]}]
    for _ in range(3):
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=12, tools=TOOLS)
        messages += [
            {"role": "assistant", "content": reply.choices[0].message.content},
            {"role": "user", "content": "ok\n"},
        ]
    return reply.choices[0].message.content


def streamed(base_url, model, problem):
    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    messages = [{"role": "user", "content": problem["prompt"]}]
    for _ in range(2):
        text = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(model=model, messages=messages, max_tokens=12, stream=True)
            if c.choices
        )
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "ok\n"}]
    return text


def rewrites(base_url, model, problem):
    """Asks twice from the same start, then once more with the first reply edited: three segments."""
    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    start = [{"role": "user", "content": problem["prompt"]}]
    first = client.chat.completions.create(model=model, messages=start, max_tokens=12).choices[0].message.content
    client.chat.completions.create(model=model, messages=start, max_tokens=12)
    edited = start + [{"role": "assistant", "content": first + "0"}, {"role": "user", "content": "ok\n"}]
    return client.chat.completions.create(model=model, messages=edited, max_tokens=12).choices[0].message.content


def completions(base_url, model, problem):
    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    prompt = problem["prompt"]
    for _ in range(3):
        text = client.completions.create(model=model, prompt=prompt, max_tokens=12).choices[0].text
        prompt += text + "ok\n"
    return text


FLAT_TOOLS = [{"type": "function", **TOOLS[0]["function"]}]  # the Responses API's tool shape


def responses(base_url, model, problem):
    """The Responses API as Codex and the Agents SDK speak it: each turn continues the last by its id."""
    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    ask = {"model": model, "max_output_tokens": 12, "tools": FLAT_TOOLS, "instructions": "Add."}
    reply = client.responses.create(input=problem["prompt"], **ask)
    for _ in range(2):
        reply = client.responses.create(
            previous_response_id=reply.id, input=[{"role": "user", "content": "ok\n"}], **ask
        )
    return reply.output_text


def responses_streamed(base_url, model, problem):
    """Streamed, nothing stored: the whole conversation each turn, the replies sent back as their items."""
    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    items = [{"role": "user", "content": problem["prompt"]}]
    for _ in range(2):
        with client.responses.stream(model=model, input=items, max_output_tokens=12, store=False) as events:
            reply = [e.response for e in events if e.type in ("response.completed", "response.incomplete")][-1]
        items += [*(i.model_dump() for i in reply.output), {"role": "user", "content": "ok\n"}]
    return reply.output_text


def agents_sdk(base_url, model, problem):
    """An OpenAI Agents SDK agent (openai-agents, not written here): its own loop over the Responses API,
    a function tool, at most three model calls."""
    import asyncio

    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def note(text: str) -> str:
        """Keep a note."""
        return "kept"

    client = openai.AsyncOpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    agent = Agent(
        name="adder",
        instructions="Add.",
        tools=[note],
        model=OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=ModelSettings(max_tokens=12),
    )
    return asyncio.run(Runner.run(agent, problem["prompt"], max_turns=3)).final_output


def claude(base_url, model, problem):
    client = anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key="rlvr", max_retries=0)
    messages = [{"role": "user", "content": problem["prompt"]}]
    for _ in range(3):
        reply = client.messages.create(model=model, max_tokens=12, messages=messages)
        text = "".join(b.text for b in reply.content if b.type == "text")
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "ok\n"}]
    return text


def reward_only(base_url, model, problem):
    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    text = (
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": problem["prompt"]}], max_tokens=12
        )
        .choices[0]
        .message.content
    )
    return float(len(text))


async def asynchronous(base_url, model, problem):
    client = openai.AsyncOpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    reply = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": problem["prompt"]}], max_tokens=12
    )
    return {"answer": reply.choices[0].message.content, "reward": 1.0}


def overlong(base_url, model, problem):
    """A harness that takes a refused request as the policy's failure and ends its episode."""
    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "7" * 20_000}])
    except openai.BadRequestError as exc:
        assert exc.code == "context_length_exceeded", exc.body
    return ""


def hangs(base_url, model, problem):
    import time

    time.sleep(3600)
