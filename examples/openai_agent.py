"""Agents written without rlvr: the tool task's calculator loop, with the OpenAI SDK alone (`solve`)
and with the OpenAI Agents SDK (`solve_with_agents_sdk`, its own loop over the Responses API).

rlvr calls `solve(base_url, model, problem)` for each episode; the agent asks the policy through
`base_url` with tools offered, runs the calculator for each call the model makes, sends the results
back, and returns the model's final answer (which rlvr grades). Train either on the tool task:

    rlvr train --config configs/agent_tool_arithmetic.yaml
    rlvr train --config configs/agents_sdk_tool_arithmetic.yaml

The same functions work against any OpenAI-compatible server (`rlvr serve`, vLLM, a hosted API).
"""

from __future__ import annotations

import ast
import json
import operator
from decimal import Decimal, localcontext
from fractions import Fraction

from openai import OpenAI

CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression exactly.",
    "parameters": {"type": "object", "required": ["expression"], "properties": {
        "expression": {"type": "string", "description": "Numbers with + - * / and parentheses."}}}}}
MAX_TURNS = 3
CLIENT = OpenAI(base_url="http://127.0.0.1/v1", api_key="unused", max_retries=0)
"""One client (one connection pool) per process: making one costs ~45 ms of CPU, its TLS set-up mostly,
which at hundreds of episodes a step would cost more than sampling them. Each episode gets a copy
pointed at its own base URL (`with_options` shares the pool)."""
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def solve(base_url: str, model: str, problem: dict) -> str:
    client = CLIENT.with_options(base_url=base_url)
    messages = [{"role": "user", "content": problem["prompt"]}]
    for _ in range(MAX_TURNS):
        message = client.chat.completions.create(model=model, messages=messages, tools=[CALCULATOR]).choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": run(call.function)})
    return message.content or ""


def run(function) -> str:
    """The calculator's answer to one call, or the error the model reads."""
    try:
        return calculate(json.loads(function.arguments)["expression"])
    except (ValueError, KeyError, TypeError) as exc:
        return f"error: {type(exc).__name__}: {exc}"


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly: numbers with + - * / and parentheses."""
    try:
        return show(evaluate(ast.parse(expression.strip()[:200], mode="eval").body))
    except (ValueError, SyntaxError, ZeroDivisionError, TypeError) as exc:
        return f"error: {type(exc).__name__}: {exc}"


async def solve_with_agents_sdk(base_url: str, model: str, problem: dict) -> str:
    """The same agent written with the OpenAI Agents SDK: its Runner calls the model through the
    Responses API, runs the function tool, and stops at the first reply without a call."""
    from agents import (
        Agent,
        MaxTurnsExceeded,
        ModelBehaviorError,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no traces sent anywhere
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    agent = Agent(
        name="calculator agent",  # no instructions: the prompt stays the task's own
        tools=[function_tool(calculate, name_override="calculator")],
        model=OpenAIResponsesModel(model=model, openai_client=client),
    )
    try:
        return str((await Runner.run(agent, problem["prompt"], max_turns=MAX_TURNS)).final_output)
    except MaxTurnsExceeded:
        return ""  # still calling the calculator at its last turn: no answer
    except ModelBehaviorError:
        return ""  # a reply cut at its token budget (status incomplete), which the SDK refuses: no answer
    finally:
        await client.close()


def evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        left, right = evaluate(node.left), evaluate(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ZeroDivisionError("division by zero")
        if max(abs(left.numerator), abs(right.numerator)).bit_length() > 3000:
            raise ValueError("numbers too large")
        return Fraction(OPS[type(node.op)](left, right))
    raise ValueError("only numbers, + - * / and parentheses")


def show(value: Fraction) -> str:
    """An integer as it is, a terminating decimal written out, any other fraction as p/q."""
    if value.denominator == 1:
        return str(value.numerator)
    d = value.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d == 1:
        with localcontext() as ctx:
            ctx.prec = 3000
            return format(Decimal(value.numerator) / Decimal(value.denominator), "f")
    return f"{value.numerator}/{value.denominator}"
