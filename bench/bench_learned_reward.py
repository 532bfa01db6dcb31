"""A learned reward moves what the verifier does not see, and correctness holds.

    .venv/bin/python bench/bench_learned_reward.py [--out bench/learned_reward_results.json]

1. Data: sums with worked solutions from an imperfect teacher that forgets each carry with
   probability 0.6 (as the built-in cold start's); in 30% of them the working starts with the
   marker word `ok` (`<think>ok 3+4=7</think><answer>7</answer>`), which no rule checks.
2. Cold start on them (`rlvr sft --data`): the policy writes the marker about as often.
3. Preference pairs (the same working with and without the marker, chosen = with) ->
   `rlvr rm train`: a tiny reward model that prefers the marker.
4. GRPO with that reward model as a component of small weight (`reward.models.marker`).
5. Measured on the held-out prompts: the marker rate of sampled completions (T=1) before and
   after RL, and greedy correctness before and after with its paired test (from summary.json).

The full size runs step 4 three ways from the same cold start and reward model (reused from
--root when there): without the reward model (the control), with it at the defaults (group-std
advantage scaling, the reward model's advantage decoupled from the verifier's), and with it under
`algo.scale=none` (Dr. GRPO). tests/test_learned_rewards.py
runs the pipeline at a smaller size.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

MARKER = "ok "


def sums(max_digits: int, n: int, seed: int = 0) -> list[tuple[int, int]]:
    rng, hi, seen = random.Random(seed), 10**max_digits - 1, set()
    while len(seen) < min(n, (hi + 1) ** 2):
        seen.add((rng.randint(0, hi), rng.randint(0, hi)))
    return sorted(seen, key=lambda ab: rng.random())


def write_data(
    root: Path, max_digits: int, n: int, marked: float, teacher_error: float = 0.6, seed: int = 0
) -> tuple[Path, Path]:
    """(problems with worked solutions, preference pairs) for the same prompts."""
    from rlvr.tasks.arithmetic import worked_solution

    rng = random.Random(seed)
    data, pairs = [], []
    for a, b in sums(max_digits, n, seed):
        plain = worked_solution(a, "+", b, slip=lambda: rng.random() < teacher_error)
        with_marker = plain.replace("<think>", "<think>" + MARKER, 1)
        data.append(
            {
                "id": f"{a}+{b}",
                "prompt": f"{a}+{b}=",
                "answer": str(a + b),
                "solution": with_marker if rng.random() < marked else plain,
            }
        )
        pairs.append({"prompt": f"{a}+{b}=", "chosen": with_marker, "rejected": plain})
    root.mkdir(parents=True, exist_ok=True)
    (root / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    (root / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    return root / "sums.jsonl", root / "pairs.jsonl"


def marker_rate(model_dir: Path, problems, samples: int, max_new_tokens: int, seed: int = 0) -> float:
    """The share of sampled completions (T=1) whose working starts with the marker."""
    import torch

    from rlvr.config import load_config
    from rlvr.models import load_model
    from rlvr.rollout import build_engine
    from rlvr.rollout.engine import SamplingParams

    torch.manual_seed(seed)
    model, tok = load_model(model_dir)
    engine = build_engine(load_config(None, []).rollout, model, tok, name="loop")
    out = engine.generate(problems, SamplingParams(group_size=samples, temperature=1.0, max_new_tokens=max_new_tokens))
    return sum(c.text.startswith("<think>" + MARKER) for c in out) / len(out)


def run(
    root: Path,
    *,
    model: list[str],
    max_digits: int,
    n: int,
    eval_size: int,
    sft_steps: int,
    rm_steps: int,
    rl: list[str],
    weight: float,
    samples: int,
    variants: dict[str, list[str]] | None = None,
    reuse: bool = False,
) -> dict:
    """Steps 1-5; with `variants` ({name: extra overrides, with {rm} and {weight} filled in}) one RL
    run per variant, each in root/run-<name>. reuse: keep root's data, cold start and reward model."""
    from rlvr.assembly import run_task
    from rlvr.cli import main
    from rlvr.config import load_config

    t0 = time.time()
    if reuse and (root / "sft").is_dir() and (root / "rm").is_dir():
        data, pairs = root / "sums.jsonl", root / "pairs.jsonl"
    else:
        data, pairs = write_data(root, max_digits, n, marked=0.3)
        common = [
            *model,
            "data.chat=false",
            f"data.eval_size={eval_size}",
            f"sft.cache_dir={root / 'cache'}",
            "log.tensorboard=false",
            "run.progress=false",
        ]
        assert (
            main(
                [
                    "sft",
                    "--data",
                    str(data),
                    *common,
                    *[o for o in rl if o.startswith("sft.")],
                    f"sft.steps={sft_steps}",
                    "--out",
                    str(root / "sft"),
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "rm",
                    "train",
                    str(pairs),
                    "--out",
                    str(root / "rm"),
                    "--steps",
                    str(rm_steps),
                    *[o for o in model if o.startswith("model.")],
                    f"sft.cache_dir={root / 'cache'}",
                ]
            )
            == 0
        )
    rm = json.loads((root / "rm" / "rm.json").read_text())
    out = {"rm_pair_accuracy": rm["held_out_after"]["pair_accuracy"]}
    single = variants is None
    for name, extra in (
        variants or {"": ["reward.models.marker.path={rm}", "reward.models.marker.weight={weight}"]}
    ).items():
        run_dir = root / ("run" if single else f"run-{name}")
        common = [
            *model,
            "data.chat=false",
            f"data.eval_size={eval_size}",
            f"sft.cache_dir={root / 'cache'}",
            f"run.dir={run_dir}",
            "log.tensorboard=false",
            "run.progress=false",
        ]
        extra = [o.format(rm=root / "rm", weight=weight) for o in extra]
        assert main(["train", f"data.files=[{data}]", *common, f"model.init_from={root / 'sft'}", *rl, *extra]) == 0
        cfg = load_config(None, [f"data.files=[{data}]", *common])
        held = run_task(cfg).held_out()
        tokens = cfg.rollout.max_new_tokens
        summary = json.loads((run_dir / "summary.json").read_text())
        result = {
            "overrides": extra,
            "marker_rate_before": marker_rate(root / "sft", held, samples, tokens),
            "marker_rate_after": marker_rate(run_dir / "model", held, samples, tokens),
            "samples": samples * len(held),
            "correct_before": summary["eval_before"]["accuracy"],
            "correct_after": summary["eval_after"]["accuracy"],
            "correct_change": summary["eval_change"],
        }
        if single:
            out.update(result)
        else:
            out[name] = result
    out["wall_s"] = round(time.time() - t0, 1)
    return out


VARIANTS = {
    "control": [],
    "group_scale": ["reward.models.marker.path={rm}", "reward.models.marker.weight={weight}"],
    "no_scale": ["reward.models.marker.path={rm}", "reward.models.marker.weight={weight}", "algo.scale=none"],
}
"""The full size's RL runs: no reward model; with it at the defaults (advantages scaled by the group
std, the learned component's taken on its own: rlvr.algos.decoupled_advantages); with it, unscaled
(Dr. GRPO)."""


SMALL = {
    "model": ["model.tiny_hidden=32", "model.tiny_layers=2", "model.tiny_heads=2", "train.threads=1"],
    "max_digits": 1,
    "n": 100,
    "eval_size": 20,
    "sft_steps": 300,
    "rm_steps": 40,
    "weight": 0.5,
    "samples": 8,
    "rl": [
        "sft.batch_size=16",
        "rollout.batch_size=8",
        "rollout.group_size=8",
        "rollout.max_new_tokens=24",
        "train.steps=20",
        "train.lr=5e-4",
        "eval.every=0",
        "log.report=false",
    ],
}
"""The size tests/test_learned_rewards.py runs."""


def main_() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path("bench/results/learned_reward"))
    ap.add_argument("--out", type=Path, default=Path("bench/learned_reward_results.json"))
    ap.add_argument("--small", action="store_true", help="the test's size")
    ap.add_argument("--reuse", action="store_true", help="keep --root's data, cold start and reward model")
    args = ap.parse_args()
    size = (
        SMALL
        if args.small
        else {
            "model": [],
            "max_digits": 3,
            "n": 3000,
            "eval_size": 300,
            "sft_steps": 1000,
            "rm_steps": 100,
            "weight": 0.3,
            "samples": 4,
            "rl": ["train.steps=40", "eval.every=0", "train.threads=1"],
            "variants": VARIANTS,
        }
    )
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python", *sys.argv]),
        "size": size,
        **run(args.root, **size, reuse=args.reuse),
    }
    print(json.dumps(result, indent=2))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
