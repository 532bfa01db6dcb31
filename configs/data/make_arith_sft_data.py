"""Write a JSONL of arithmetic problems with verified worked solutions (deterministic).

    python configs/data/make_arith_sft_data.py [--n 3000] [--out configs/data/arith_sft.jsonl]

Each record: `prompt` (`667+259=`), `answer` (`926`), `solution` (the column-by-column working in
the built-in task's format: `<think>7+9=16 6+5+1=12 6+2+1=9</think><answer>926</answer>`), `source`.
It stands for a user's own data set with worked solutions: `rlvr sft --data FILE` cold-starts the
tiny model on it and `rlvr train data.files=[FILE]` continues with RL (docs/getting-started/your-model-and-data.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlvr.tasks.arithmetic import ArithmeticTask, worked_solution


def records(n: int, seed: int = 0) -> list[dict]:
    out, seen = [], set()
    for p in ArithmeticTask(seed=seed).train_stream(seed):
        if p.prompt in seen:
            continue
        seen.add(p.prompt)
        a, op, b = p.metadata["operands"]
        solution = worked_solution(a, op, b)
        assert solution.endswith(f"<answer>{p.answer}</answer>")  # verified: the working reaches the gold
        out.append({"id": f"arith-{len(out)}", "prompt": p.prompt, "answer": p.answer, "solution": solution,
                    "source": "arith"})
        if len(out) == n:
            return out
    raise AssertionError("unreachable: the stream is endless")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "arith_sft.jsonl")
    args = ap.parse_args()
    args.out.write_text("".join(json.dumps(r) + "\n" for r in records(args.n)))
    print(f"{args.out}: {args.n} records")


if __name__ == "__main__":
    main()
