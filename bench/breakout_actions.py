"""Does a Breakout policy act on the ball? On the states a teacher visits (24 held-out episodes of 96
turns, the teacher erring at 30% of its turns, each turn in the window the policy sees: env.history
2), the policy's next-token probabilities of L, R and N against the move of a tracker on the cells it
is shown (L when the ball's cell is left of the paddle's, R right, N the same cell).

    .venv/bin/python bench/breakout_actions.py MODEL_DIR [MODEL_DIR ...]

Prints, per model, the share of states where its greedy action is the tracker's, and its greedy
action's frequency under each of the tracker's moves: a policy that ignores the ball has the same
row three times. (The teacher itself tracks in pixels, not cells: it agrees with the cell tracker on
84% of these states.)
"""

from __future__ import annotations

import random
import re
import sys
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rlvr.models.loading import load_model  # noqa: E402
from rlvr.records import Problem  # noqa: E402
from rlvr.tasks.games import breakout_start, breakout_teacher  # noqa: E402
from rlvr.train.sft import sft_pairs  # noqa: E402


def states(tokenizer) -> list[list[int]]:
    rng = random.Random(12345)
    problems = [
        Problem(
            id=f"probe:{k}", prompt=breakout_start(), source="breakout", verifier="env", metadata={"seed": 777000 + k}
        )
        for k in range(24)
    ]
    demos = [breakout_teacher(p, 0.3, rng, 96) for p in problems]
    return [context for context, _, _ in sft_pairs(problems, tokenizer, demos, history=2)]


def main() -> None:
    for path in sys.argv[1:]:
        model, tokenizer = load_model(path, "float32")
        model.eval()
        ids = [tokenizer(a, add_special_tokens=False).input_ids[0] for a in "LRN"]
        counts: Counter = Counter()
        with torch.no_grad():
            for context in states(tokenizer):
                bx, _, px = map(int, re.findall(r"b(\d+),(\d+)p(\d+)", tokenizer.decode(context))[-1])
                want = "N" if bx == px else ("L" if bx < px else "R")
                logits = model(input_ids=torch.tensor([context])).logits[0, -1, ids]
                counts[want, "LRN"[int(logits.argmax())]] += 1
        n = sum(counts.values())
        agree = sum(v for (want, got), v in counts.items() if want == got) / n
        print(f"{path}: {n} states, greedy action = the cell tracker's on {agree:.0%}")
        for want in "LRN":
            k = sum(v for (w, _), v in counts.items() if w == want)
            print(f"  tracker {want} ({k}): " + ", ".join(f"{a} {counts[want, a] / max(k, 1):.0%}" for a in "LRN"))


if __name__ == "__main__":
    main()
