"""`rlvr rm train PAIRS.jsonl --out DIR`: a reward model from preference pairs (Bradley-Terry).

The base is a model directory, a hub id, a packaged model (`smollm2`) or `tiny` (the built-in tiny
model, as `rlvr train` builds it: give key=value overrides such as model.tiny_hidden=64). A
seeded --eval-frac of the pairs is held out; their pair accuracy before and after training is
printed and written to DIR/rm.json. DIR loads with AutoModelForSequenceClassification and goes
into a run as `reward.models.<name>.path=DIR`; `rlvr eval DIR --pairs FILE` scores it on other pairs.
"""

from __future__ import annotations

import argparse

from rlvr.configlib import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "train",
        help="train a reward model on preference pairs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("pairs", metavar="PAIRS", help="JSONL: prompt, chosen, rejected (or chats; rlvr.train.rm)")
    p.add_argument("--out", metavar="DIR", required=True, help="where to write the reward model")
    p.add_argument("--base", default="tiny", help="base model: a directory, hub id, 'smollm2' or 'tiny' (default)")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    p.add_argument("--batch-size", type=int, default=16, help="pairs per step (default 16)")
    p.add_argument("--lr", type=float, default=1e-4, help="learning rate (default 1e-4)")
    p.add_argument("--eval-frac", type=float, default=0.1, help="share of pairs held out (default 0.1)")
    p.add_argument("--max-length", type=int, default=1024, help="tokens read per sequence (default 1024)")
    p.add_argument("--lora", action="store_true", help="train a LoRA adapter (needs peft), merged on export")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for --base tiny/smollm2")


def base_model(name: str, overrides: list[str]) -> str:
    from pathlib import Path

    from rlvr.config import load_config
    from rlvr.envs.settings import check_env
    from rlvr.assembly import base_model_path

    if Path(name).is_dir():
        return name
    cfg = load_config(None, [*overrides, f"model.name={name}"])
    check_env(cfg.env, cfg.task, cfg.algo, cfg.reward, cfg.sources)  # the whole config checked, as every command does
    return str(base_model_path(cfg))


def run(args: argparse.Namespace) -> int:
    from rlvr.train.rm import load_pairs, train_reward_model

    if args.steps < 1 or args.batch_size < 1 or not 0 <= args.eval_frac < 1:
        raise ConfigError("--steps and --batch-size must be >= 1, --eval-frac in [0, 1)")
    pairs = load_pairs(args.pairs)

    def on_step(step: int, loss: float) -> None:
        if step % 50 == 0 or step == args.steps - 1:
            print(f"rm step {step + 1}/{args.steps}  loss {loss:.4f}", flush=True)

    report = train_reward_model(
        base_model(args.base, args.overrides),
        pairs,
        args.out,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        eval_frac=args.eval_frac,
        seed=args.seed,
        lora=args.lora,
        max_length=args.max_length,
        on_step=on_step,
    )
    before, after = report["held_out_before"], report["held_out_after"]
    if after:
        print(f"held-out pair accuracy: {before['pair_accuracy']:.1%} -> {after['pair_accuracy']:.1%} (n={after['n']})")
    print(f"reward model: {args.out}  (reward.models.<name>.path={args.out})")
    return 0
