"""Built-in code task (`task.name=code`): small Python functions of graded difficulty, generated locally.

    Python: g(x) returns the larger of x and 4.
    ->  ```python
        def g(x):
         return max(x,4)
        ```

Fifteen families in three levels (arithmetic on an int; comparisons, remainders and string
functions; slicing and lists), each with a one-digit constant K and a one-letter function name.
Held-out problems come from (family, K) pairs that training never sees under any name. Tests are
function-mode cases computed by a reference implementation: five inputs per problem, at least
three of them unusual for the family (zero, negatives, a large number; the empty string, one
character, spaces and capitals; the empty list, one element, negatives).

Worked solutions feed cold-start SFT from an imperfect teacher (`teacher_solution`) with one
misconception per family: it writes a plausible neighbouring expression (`min` for `max`, `s[K:]`
for the first K characters, `x//K` for x modulo K, ...) with a probability that grows with the
family's level, sft.teacher_error x level / 2 (0.3, 0.6 and 0.9 at the default 0.6). Every
misconception fails at least one test, so RL against the tests is what corrects it. Completions
are short (one-space indentation) so they fit rollout.max_new_tokens=48 of the tiny model.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rlvr.records import Problem

SOURCE = "code"
VERSION = 2
"""Bumped when the problems or the teacher change, so a cached cold start is not reused (rlvr.train.sft)."""
NAMES = "fghpqrtu"
"""Function names; not x or s, which are the parameters."""


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
    """What the function returns, with {k}."""
    body: str
    """The returned expression, with {k}."""
    mistake: str
    """The teacher's misconception: a neighbouring expression that fails some test, with {k}."""
    reference: Callable[[Any, int], Any]
    inputs: Callable[[int], list]
    k_range: tuple[int, int] = (1, 9)


FAMILIES = [
    Family("add", 1, "x", "x plus {k}", "x+{k}", "x-{k}", lambda x, k: x + k, INTS),
    Family("sub", 1, "x", "x minus {k}", "x-{k}", "{k}-x", lambda x, k: x - k, INTS),
    Family("mul", 1, "x", "x times {k}", "x*{k}", "x**{k}", lambda x, k: x * k, INTS, (2, 9)),
    Family("sq", 1, "x", "x squared plus {k}", "x*x+{k}", "x*2+{k}", lambda x, k: x * x + k, INTS),
    Family("max", 2, "x", "the larger of x and {k}", "max(x,{k})", "min(x,{k})", lambda x, k: max(x, k), INTS),
    Family("min", 2, "x", "the smaller of x and {k}", "min(x,{k})", "max(x,{k})", lambda x, k: min(x, k), INTS),
    Family("mod", 2, "x", "x modulo {k}", "x%{k}", "x//{k}", lambda x, k: x % k, INTS, (2, 9)),
    Family("dist", 2, "x", "the distance between x and {k}", "abs(x-{k})", "x-{k}", lambda x, k: abs(x - k), INTS),
    Family("rep", 2, "s", "the string s repeated {k} times", "s*{k}", "[s]*{k}", lambda s, k: s * k, STRS, (2, 9)),
    Family("len", 2, "s", "the length of s plus {k}", "len(s)+{k}", "len(s)*{k}", lambda s, k: len(s) + k, STRS),
    Family("head", 3, "s", "the first {k} characters of s", "s[:{k}]", "s[{k}:]", lambda s, k: s[:k], STRS),
    Family("tail", 3, "s", "the last {k} characters of s", "s[-{k}:]", "s[:-{k}]", lambda s, k: s[-k:], STRS),
    Family("sum", 3, "x", "the sum of the list x plus {k}", "sum(x)+{k}", "len(x)+{k}", lambda x, k: sum(x) + k, LISTS),
    Family(
        "cnt",
        3,
        "x",
        "how many times {k} is in the list x",
        "x.count({k})",
        "x.index({k})",
        lambda x, k: x.count(k),
        LISTS,
        (0, 9),
    ),
    Family("app", 3, "x", "the list x with {k} appended", "x+[{k}]", "[{k}]+x", lambda x, k: x + [k], LISTS),
]
BY_NAME = {f.name: f for f in FAMILIES}


def solution(family: Family, k: int, name: str = "f", body: str | None = None) -> str:
    return f"```python\ndef {name}({family.arg}):\n return {(body or family.body).format(k=k)}\n```"


def mistake_rate(family: Family, error_rate: float) -> float:
    """How often the teacher writes the family's misconception: error_rate x level / 2, at most 1."""
    return min(1.0, error_rate * family.level / 2)


def teacher_solution(problem: Problem, error_rate: float, rng: random.Random) -> str:
    """A cold-start demonstration: the right function, or the family's misconception with
    probability `mistake_rate`."""
    fam, k, name = BY_NAME[problem.metadata["family"]], problem.metadata["k"], problem.tests["entry_point"]
    wrong = rng.random() < mistake_rate(fam, error_rate)
    return solution(fam, k, name, fam.mistake if wrong else None)


@dataclass(frozen=True)
class CodeTask:
    eval_size: int = 200
    seed: int = 0

    def _pairs(self) -> list[tuple[str, int]]:
        return [(f.name, k) for f in FAMILIES for k in range(f.k_range[0], f.k_range[1] + 1)]

    def _problem(self, family: str, k: int, name: str, split: str) -> Problem:
        fam = BY_NAME[family]
        cases = [{"args": [x], "expected": fam.reference(x, k)} for x in fam.inputs(k)]
        return Problem(
            id=f"{split}:{family}:{k}:{name}",
            source=SOURCE,
            verifier="code",
            prompt=f"Python: {name}({fam.arg}) returns {fam.describe.format(k=k)}.\n",
            tests={"type": "function", "entry_point": name, "cases": cases},
            metadata={"solution": solution(fam, k, name), "family": family, "k": k, "level": fam.level},
        )

    def _held_pairs(self) -> set[tuple[str, int]]:
        """A quarter of the (family, K) pairs, fixed by the seed: held out under every name."""
        pairs = self._pairs()
        return set(random.Random(f"code-heldout-{self.seed}").sample(pairs, len(pairs) // 4))

    def held_out(self) -> list[Problem]:
        """`eval_size` problems (at most all of them) from the held-out pairs, fixed by the seed."""
        held = sorted(self._held_pairs())
        space = [(family, k, name) for family, k in held for name in NAMES]
        picked = random.Random(f"code-heldout-names-{self.seed}").sample(space, min(self.eval_size, len(space)))
        return [self._problem(family, k, name, "eval") for family, k, name in picked]

    def train_stream(self, seed: int) -> Iterator[Problem]:
        """Endless training problems from the pairs the held-out split does not hold."""
        held = self._held_pairs()
        train = [pair for pair in self._pairs() if pair not in held]
        rng = random.Random(f"code-train-{self.seed}-{seed}")
        while True:
            family, k = rng.choice(train)
            yield self._problem(family, k, rng.choice(NAMES), "train")
