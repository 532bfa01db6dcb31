"""Built-in code task (`task.name=code`): small Python functions of graded difficulty, generated locally.

    Python: f(x) returns the larger of x and 42.
    ->  ```python
        def f(x):
         return max(x,42)
        ```

Twelve families in three levels (arithmetic on an int; comparisons and string functions; slicing
and lists), each with a constant K, so held-out problems are (family, K) pairs training never
sees. Tests are function-mode cases computed by a reference implementation: five inputs per
problem, at least three of them unusual for the family (zero, negatives, a large number; the empty
string, one character, spaces and capitals; the empty list, one element, negatives), and for the
number families both neighbours of K, so a function with K - 1 or K + 1 fails. Worked
solutions feed cold-start SFT; the imperfect teacher (`teacher_solution`) writes a wrong constant
with probability sft.teacher_error, and RL against the tests is what corrects it. Completions are
short (one-space indentation) so they fit rollout.max_new_tokens=48 of the tiny model.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rlvr.records import Problem

SOURCE = "code"

def INTS(k: int) -> list:  # noqa: N802 (input sets, by the family's constant)
    return [0, -7, 10**6, k - 1, k + 1]  # zero, a negative, a large number, and both sides of K


def STRS(k: int) -> list:  # noqa: N802
    return ["", "a", "Hello World", "abcdefghij", "xY z"]  # empty, one character, spaces and capitals


def LISTS(k: int) -> list:  # noqa: N802
    return [[], [0], [-3, 5, -8], [k, 3, k], [k - 1, k + 1, k]]  # empty, one element, negatives, K's neighbours


@dataclass(frozen=True)
class Family:
    name: str
    level: int
    arg: str
    """The parameter's name: x (an int or a list) or s (a string)."""
    describe: str
    """What f returns, with {k}."""
    body: str
    """The returned expression, with {k}."""
    reference: Callable[[Any, int], Any]
    inputs: Callable[[int], list]
    k_range: tuple[int, int]


FAMILIES = [
    Family("add", 1, "x", "x plus {k}", "x+{k}", lambda x, k: x + k, INTS, (1, 99)),
    Family("sub", 1, "x", "x minus {k}", "x-{k}", lambda x, k: x - k, INTS, (1, 99)),
    Family("mul", 1, "x", "x times {k}", "x*{k}", lambda x, k: x * k, INTS, (2, 99)),
    Family("max", 2, "x", "the larger of x and {k}", "max(x,{k})", lambda x, k: max(x, k), INTS, (1, 99)),
    Family("min", 2, "x", "the smaller of x and {k}", "min(x,{k})", lambda x, k: min(x, k), INTS, (1, 99)),
    Family("mod", 2, "x", "x modulo {k}", "x%{k}", lambda x, k: x % k, INTS, (2, 99)),
    Family("rep", 2, "s", "the string s repeated {k} times", "s*{k}", lambda s, k: s * k, STRS, (2, 9)),
    Family("len", 2, "s", "the length of s plus {k}", "len(s)+{k}", lambda s, k: len(s) + k, STRS, (1, 99)),
    Family("head", 3, "s", "the first {k} characters of s", "s[:{k}]", lambda s, k: s[:k], STRS, (1, 9)),
    Family("tail", 3, "s", "the last {k} characters of s", "s[-{k}:]", lambda s, k: s[-k:], STRS, (1, 9)),
    Family("sum", 3, "x", "the sum of the list x plus {k}", "sum(x)+{k}", lambda x, k: sum(x) + k, LISTS, (1, 99)),
    Family("cnt", 3, "x", "how many times {k} is in the list x", "x.count({k})", lambda x, k: x.count(k), LISTS,
           (0, 9)),
]
BY_NAME = {f.name: f for f in FAMILIES}


def solution(family: Family, k: int) -> str:
    return f"```python\ndef f({family.arg}):\n return {family.body.format(k=k)}\n```"


def teacher_solution(problem: Problem, error_rate: float, rng: random.Random) -> str:
    """A cold-start demonstration: the right function, except that with `error_rate` the teacher
    writes a neighbouring constant (K - 1 or K + 1)."""
    name, k = problem.metadata["family"], problem.metadata["k"]
    if rng.random() < error_rate:
        k = k + rng.choice((-1, 1)) if k > 0 else k + 1
    return solution(BY_NAME[name], k)


@dataclass(frozen=True)
class CodeTask:
    eval_size: int = 200
    seed: int = 0

    def _space(self) -> list[tuple[str, int]]:
        return [(f.name, k) for f in FAMILIES for k in range(f.k_range[0], f.k_range[1] + 1)]

    def _problem(self, name: str, k: int, split: str) -> Problem:
        fam = BY_NAME[name]
        cases = [{"args": [x], "expected": fam.reference(x, k)} for x in fam.inputs(k)]
        return Problem(id=f"{split}:{name}:{k}", source=SOURCE, verifier="code",
                       prompt=f"Python: f({fam.arg}) returns {fam.describe.format(k=k)}.\n",
                       tests={"type": "function", "entry_point": "f", "cases": cases},
                       metadata={"solution": solution(fam, k), "family": name, "k": k, "level": fam.level})

    def held_out(self) -> list[Problem]:
        """`eval_size` distinct (family, K) pairs (at most a quarter of them all), fixed by the seed."""
        space = self._space()
        rng = random.Random(f"code-heldout-{self.seed}")
        picked = rng.sample(space, min(self.eval_size, len(space) // 4))
        return [self._problem(name, k, "eval") for name, k in picked]

    def train_stream(self, seed: int) -> Iterator[Problem]:
        """Endless training problems from the pairs the held-out split does not hold."""
        held = {(p.metadata["family"], p.metadata["k"]) for p in self.held_out()}
        train = [pair for pair in self._space() if pair not in held]
        rng = random.Random(f"code-train-{self.seed}-{seed}")
        while True:
            name, k = rng.choice(train)
            yield self._problem(name, k, "train")
