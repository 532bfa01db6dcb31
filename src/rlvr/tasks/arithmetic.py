"""Built-in verifiable task: multi-digit arithmetic with worked solutions.

A problem is `a+b=` (operators from `ops`); the worked solution does the
column arithmetic right to left, one column per step, so a small model can
learn it:

    478+964=  ->  <think>8+4=12 7+6+1=14 4+9+1=14</think><answer>1442</answer>

Cold-start demonstrations can come from an imperfect teacher that forgets
carries (`teacher_solution`); gold answers are always exact.

Train and held-out problems come from disjoint generators: the held-out
set is drawn first with its own seed and every training draw that collides
with it is rejected, so evaluation never sees a training prompt.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rlvr.records import Problem

SOURCE = "arithmetic"


def _columns_add(a: int, b: int, slip: Callable[[], bool]) -> tuple[str, int]:
    steps, carry, digits = [], 0, []
    da, db = str(a)[::-1], str(b)[::-1]
    for i in range(max(len(da), len(db))):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        expr = f"{x}+{y}" + (f"+{carry}" if carry else "")
        total = x + y + carry
        steps.append(f"{expr}={total}")
        digits.append(total % 10)
        carry = total // 10
        if carry and slip():  # the teacher forgets this carry
            carry = 0
    result = int((str(carry) if carry else "") + "".join(map(str, reversed(digits))))
    return " ".join(steps), result


def _columns_sub(a: int, b: int, slip: Callable[[], bool]) -> tuple[str, int]:
    # a >= b is guaranteed by the generator; borrow is written as -1.
    steps, borrow, digits = [], 0, []
    da, db = str(a)[::-1], str(b)[::-1]
    for i in range(len(da)):
        x = int(da[i])
        y = int(db[i]) if i < len(db) else 0
        expr = f"{x}-{y}" + (f"-{borrow}" if borrow else "")
        total = x - y - borrow
        borrow = 1 if total < 0 else 0
        steps.append(f"{expr}={total + 10 * borrow}" + ("b" if borrow else ""))
        digits.append(total + 10 * borrow)
        if borrow and slip():  # the teacher forgets this borrow
            borrow = 0
    return " ".join(steps), int("".join(map(str, reversed(digits))))


def _partial_products(a: int, b: int, slip: Callable[[], bool]) -> tuple[str, int]:
    # a * b as a sum of a * (digit of b) shifted: 123*45 -> 123*5=615 123*40=4920
    steps = []
    for i, d in enumerate(str(b)[::-1]):
        term = int(d) * 10**i
        steps.append(f"{a}*{term}={a * term}")
    return " ".join(steps), a * b


WORKINGS = {"+": _columns_add, "-": _columns_sub, "*": _partial_products}
APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def worked_solution(a: int, op: str, b: int, slip: Callable[[], bool] = lambda: False) -> str:
    """The worked example; `slip()` decides, at each carry/borrow, whether the teacher forgets it."""
    work, result = WORKINGS[op](a, b, slip)
    return f"<think>{work}</think><answer>{result}</answer>"


def teacher_solution(problem: Problem, error_rate: float, rng: random.Random) -> str:
    """A cold-start demonstration from an imperfect teacher that forgets each carry with `error_rate`.

    Real cold-start data is distilled from a weaker model and carries its
    systematic mistakes; RL with a verifiable reward is what corrects them.
    """
    a, op, b = problem.metadata["operands"]
    return worked_solution(a, op, b, slip=lambda: rng.random() < error_rate)


@dataclass(frozen=True)
class ArithmeticTask:
    min_digits: int = 1
    max_digits: int = 3
    ops: tuple[str, ...] = ("+",)
    eval_size: int = 500
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [op for op in self.ops if op not in WORKINGS]
        if bad:
            raise ValueError(f"task.ops: unknown operator(s) {bad}; allowed: {sorted(WORKINGS)}")
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError("task.min_digits must be >= 1 and <= task.max_digits")

    def _draw(self, rng: random.Random) -> tuple[int, str, int]:
        op = rng.choice(self.ops)
        nd_a = rng.randint(self.min_digits, self.max_digits)
        nd_b = rng.randint(self.min_digits, self.max_digits)
        a = rng.randint(10 ** (nd_a - 1) if nd_a > 1 else 0, 10**nd_a - 1)
        b = rng.randint(10 ** (nd_b - 1) if nd_b > 1 else 0, 10**nd_b - 1)
        if op == "-" and b > a:
            a, b = b, a
        if op == "*":
            b = rng.randint(0, 99)  # keep products short enough for a tiny model
        return a, op, b

    def _problem(self, a: int, op: str, b: int, split: str) -> Problem:
        return Problem(
            id=f"{split}:{a}{op}{b}",
            prompt=f"{a}{op}{b}=",
            answer=str(APPLY[op](a, b)),
            source=SOURCE,
            verifier="math",
            metadata={"solution": worked_solution(a, op, b), "operands": (a, op, b)},
        )

    def held_out(self) -> list[Problem]:
        """The evaluation split: `eval_size` distinct problems, fixed by the seed."""
        rng = random.Random(f"heldout-{self.seed}")
        seen: dict[tuple[int, str, int], None] = {}
        space = self._space_size()
        target = min(self.eval_size, space // 4)
        while len(seen) < target:
            seen.setdefault(self._draw(rng))
        return [self._problem(a, op, b, "eval") for (a, op, b) in seen]

    def train_stream(self, seed: int) -> Iterator[Problem]:
        """Endless training problems, never one from the held-out split."""
        held = {p.prompt for p in self.held_out()}
        rng = random.Random(f"train-{self.seed}-{seed}")
        while True:
            a, op, b = self._draw(rng)
            p = self._problem(a, op, b, "train")
            if p.prompt not in held:
                yield p

    def _space_size(self) -> int:
        n = sum(10**d for d in range(self.min_digits, self.max_digits + 1))
        return n * n * len(self.ops)
