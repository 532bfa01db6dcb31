"""Write a JSONL of arithmetic problems with verified worked solutions (deterministic).

    python configs/data/make_arith_sft_data.py [--n 3000] [--teacher-error 0] [--out configs/data/arith_sft.jsonl]

Each record: `prompt` (`667+259=`), `answer` (`926`), `solution` (the column-by-column working in
the built-in task's format: `<think>7+9=16 6+5+1=12 6+2+1=9</think><answer>926</answer>`), `source`.
With --teacher-error p the solutions come from the built-in cold start's imperfect teacher, which
forgets each carry with probability p (a data set distilled from a weaker model; `rlvr data audit`
lists the solutions whose answer disagrees with the gold). It stands for a user's own data set
with worked solutions: `rlvr sft --data FILE` cold-starts the
tiny model on it and `rlvr train data.files=[FILE]` continues with RL (docs/getting-started/your-model-and-data.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlvr.tasks.arithmetic import ArithmeticTask, worked_solution


def records(n: int, seed: int = 0, teacher_error: float = 0.0) -> list[dict]:
    import random

    rng = random.Random(f"teacher-{seed}")
    out, seen = [], set()
    for p in ArithmeticTask(seed=seed).train_stream(seed):
        if p.prompt in seen:
            continue
        seen.add(p.prompt)
        a, op, b = p.metadata["operands"]
        solution = worked_solution(a, op, b, slip=lambda: rng.random() < teacher_error)
        # verified unless the teacher errs: the working reaches the gold
        assert teacher_error > 0 or solution.endswith(f"<answer>{p.answer}</answer>")
        out.append({"id": f"arith-{len(out)}", "prompt": p.prompt, "answer": p.answer, "solution": solution,
                    "source": "arith"})
        if len(out) == n:
            return out
    raise AssertionError("unreachable: the stream is endless")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--teacher-error", type=float, default=0.0, help="chance the teacher forgets each carry")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "arith_sft.jsonl")
    args = ap.parse_args()
    args.out.write_text("".join(json.dumps(r) + "\n" for r in records(args.n, teacher_error=args.teacher_error)))
    print(f"{args.out}: {args.n} records")


if __name__ == "__main__":
    main()
