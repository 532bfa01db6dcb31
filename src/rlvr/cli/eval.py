"""`rlvr eval`: greedy held-out accuracy of a model directory on the configured task."""

from __future__ import annotations

import json

from rlvr.cli._common import add_config_arguments, config_from_args


def add_arguments(parser) -> None:
    parser.add_argument("model", metavar="MODEL_DIR", help="a Hugging Face model directory (e.g. runs/default/model)")
    add_config_arguments(parser)


def run(args) -> int:
    cfg = config_from_args(args)
    from rlvr.evaluate import evaluate
    from rlvr.models import load_model
    from rlvr.rewards import build_reward
    from rlvr.rollout import build_engine
    from rlvr.tasks import build_task

    model, tokenizer = load_model(args.model, cfg.model.dtype)  # a missing directory: a one-line config error
    problems = build_task(cfg).held_out()[: cfg.eval.n]
    engine = build_engine(cfg.rollout, model, tokenizer, name=cfg.eval.engine, model_dir=args.model, seed=cfg.seed,
                          dtype=cfg.model.dtype)  # eval.engine, else rollout.engine
    result = evaluate(engine, problems, build_reward(cfg.reward),
                      max_new_tokens=cfg.rollout.max_new_tokens, batch_size=cfg.eval.batch_size)
    print(json.dumps(result))
    return 0
