"""Built-in agent task (`task.name=tool_arithmetic`): arithmetic a small model cannot do in its head,
with a calculator it can call.

A problem is `482193*39=` (4- to 6-digit times 2-digit) or `854736/12=` (a 4- to 6-digit dividend,
divided exactly by a 2-digit divisor). An episode, in the compact tool format (env.tool_format=compact):

    482193*39=<tool_call>calculator(482193*39)</tool_call><eos>          sampled
    <tool_response>18805527</tool_response>                              the tool's answer
    <answer>18805527</answer><eos>                                       sampled, graded

Cold-start demonstrations come from an imperfect teacher with two systematic misconceptions,
each with probability sft.teacher_error: for a product it calls the calculator with the last
digit of the second operand dropped; for a quotient it skips the tool and answers with the
quotient rounded to hundreds. Greedy decoding of the cold start follows them; RL against the
verified answer is what corrects them. Golds are always exact.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from rlvr.records import Problem

SOURCE = "tool_arithmetic"
VERSION = 2
"""Bumped whenever what the prompts or demonstrations look like changes (cached cold starts are keyed by it)."""
TOOL = "calculator"
Segment = tuple[str, bool]
"""(text, sampled by the model): a demonstration turn by turn; appended text is context only."""


def call(expr: str) -> str:
    return f"<tool_call>{TOOL}({expr})</tool_call>"


def demonstration(expr: str, result: int) -> list[Segment]:
    """The right way: call, read the response, answer with it."""
    return [
        (call(expr), True),
        (f"<tool_response>{result}</tool_response>", False),
        (f"<answer>{result}</answer>", True),
    ]


def teacher_solution(problem: Problem, error_rate: float, rng: random.Random) -> list[Segment]:
    a, op, b = problem.metadata["operands"]
    if rng.random() >= error_rate:
        return demonstration(f"{a}{op}{b}", int(problem.answer or 0))
    if op == "*":  # misreads the second operand: its last digit dropped
        b_read = b // 10
        return demonstration(f"{a}*{b_read}", a * b_read)
    guess = round(a / b, -2)  # no tool: the quotient in its head, to the hundred
    guess = int(guess) if int(guess) != a // b else int(guess) + 100
    return [(f"<answer>{guess}</answer>", True)]


@dataclass(frozen=True)
class ToolArithmeticTask:
    eval_size: int = 500
    seed: int = 0

    def _draw(self, rng: random.Random) -> tuple[int, str, int]:
        if rng.random() < 0.5:  # 4- to 6-digit times 2-digit
            return rng.randint(10**3, 10 ** rng.randint(4, 6) - 1), "*", rng.randint(11, 99)
        divisor = rng.randint(11, 99)  # a 4- to 6-digit dividend, divided exactly by a 2-digit divisor
        quotient = rng.randint(1000 // divisor + 1, 999_999 // divisor)
        return divisor * quotient, "/", divisor

    def _problem(self, a: int, op: str, b: int, split: str) -> Problem:
        answer = a * b if op == "*" else a // b
        return Problem(
            id=f"{split}:{a}{op}{b}",
            prompt=f"{a}{op}{b}=",
            answer=str(answer),
            source=SOURCE,
            verifier="math",
            metadata={"operands": (a, op, b)},
        )

    def held_out(self) -> list[Problem]:
        """The evaluation split: `eval_size` distinct problems, fixed by the seed."""
        rng = random.Random(f"tool-heldout-{self.seed}")
        seen: dict[tuple[int, str, int], None] = {}
        while len(seen) < self.eval_size:
            seen.setdefault(self._draw(rng))
        return [self._problem(a, op, b, "eval") for (a, op, b) in seen]

    def train_stream(self, seed: int) -> Iterator[Problem]:
        """Endless training problems, never one from the held-out split."""
        held = {p.prompt for p in self.held_out()}
        rng = random.Random(f"tool-train-{self.seed}-{seed}")
        while True:
            p = self._problem(*self._draw(rng), "train")
            if p.prompt not in held:
                yield p
