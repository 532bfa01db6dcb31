"""Write the two small data files of the `smollm2` preset (deterministic; rerun to regenerate).

    python configs/data/make_smollm2_data.py

arith.jsonl  chat-message records ("messages"): two-number sums, differences and small products; the
             messages end with the assistant's worked solution (what cold-start SFT imitates)
word.jsonl   plain-text records ("prompt"): one-step word problems; data.chat wraps them as a user
             message; the worked solution in a `solution` field

The solutions follow the system prompt's example (`48 - 33 = 15, so the answer is \\boxed{15}.`);
RL never sees them (configs/smollm2_sft.yaml cold-starts on them, configs/smollm2.yaml does not).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent / "smollm2"
N = 200

WORD = [
    ("{name} has {a} apples. {pron} buys {b} more apples. How many apples does {name} have now?", "+"),
    ("A shelf holds {a} books. Someone puts {b} more books on it. How many books are on the shelf?", "+"),
    ("{name} had {a} coins and spent {b} of them. How many coins does {name} have left?", "-"),
    ("A bus carries {a} people. At the next stop {b} people get off. How many people are still on the bus?", "-"),
    ("There are {a} boxes with {b} pencils in each box. How many pencils are there in total?", "*"),
    ("{name} reads {b} pages every day for {a} days. How many pages does {name} read?", "*"),
]
NAMES = [("Sam", "He"), ("Mia", "She"), ("Leo", "He"), ("Ana", "She"), ("Tom", "He"), ("Zoe", "She")]


def operands(rng: random.Random, op: str) -> tuple[int, int]:
    if op == "*":
        return rng.randint(2, 12), rng.randint(2, 9)
    a, b = rng.randint(10, 99), rng.randint(2, 60)
    return (max(a, b), min(a, b)) if op == "-" else (a, b)


def value(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def solution(a: int, sym: str, b: int, v: int) -> str:
    return f"{a} {sym} {b} = {v}, so the answer is \\boxed{{{v}}}."


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    rng = random.Random(2024)
    with (HERE / "arith.jsonl").open("w") as f:
        for i in range(N):
            op = rng.choice("+-*")
            a, b = operands(rng, op)
            sym = {"+": "+", "-": "-", "*": "\u00d7"}[op]
            v = value(a, op, b)
            record = {"id": f"arith-{i}", "messages": [{"role": "user", "content": f"What is {a} {sym} {b}?"},
                                                       {"role": "assistant", "content": solution(a, sym, b, v)}],
                      "answer": str(v), "source": "arith"}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    with (HERE / "word.jsonl").open("w") as f:
        for i in range(N):
            template, op = rng.choice(WORD)
            a, b = operands(rng, op)
            name, pron = rng.choice(NAMES)
            v = value(a, op, b)
            sym = {"+": "+", "-": "-", "*": "\u00d7"}[op]
            record = {"id": f"word-{i}", "prompt": template.format(name=name, pron=pron, a=a, b=b),
                      "answer": str(v), "solution": solution(a, sym, b, v), "source": "word"}
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
