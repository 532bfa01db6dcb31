"""Small builders the unit tests share."""

from __future__ import annotations

import dataclasses

from rlvr.algos import LossSettings
from rlvr.config import Config, load_config
from rlvr.envs.settings import check_env
from rlvr.rollout import HFEngine
from rlvr.train.update import UpdateSettings

LOSS_FIELDS = {f.name for f in dataclasses.fields(LossSettings)}


def checked_config(path=None, overrides: list[str] | None = None) -> Config:
    """load_config, then the checks only the environment's class answers (as the commands and train() do)."""
    cfg = load_config(path, overrides)
    check_env(cfg.env, cfg.task, cfg.algo, cfg.reward, cfg.sources)
    return cfg


def split_settings(flat: dict) -> UpdateSettings:
    """UpdateSettings from one flat dict of update and loss keys (loss_type, clip_low, beta, ...)."""
    loss = {k: v for k, v in flat.items() if k in LOSS_FIELDS}
    rest = {k: v for k, v in flat.items() if k not in LOSS_FIELDS}
    return UpdateSettings(**rest, loss=LossSettings(**loss))


def update_settings(**changes) -> UpdateSettings:
    """The tests' update: one epoch, one mini-batch, GRPO's clipped loss without KL, max_len 8; `changes`
    override any of its keys."""
    base = dict(
        ppo_epochs=1,
        mini_batches=1,
        micro_batch_size=0,
        max_grad_norm=1.0,
        temperature=1.0,
        loss_type="grpo",
        clip_low=0.2,
        clip_high=0.2,
        dual_clip=None,
        ratio_level="token",
        beta=0.0,
        kl_kind="k3",
        max_len=8,
        entropy_coef=0.0,
    )
    return split_settings({**base, **changes})


def sample(model, tok, problems, params, **kwargs):
    """Completions from transformers' generate (the 'hf' engine) on `model`."""
    return HFEngine(model, tok).generate(problems, params, **kwargs)


CHATML = (
    "{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}"
)
"""A ChatML-shaped chat template on the tiny tokenizer (its bos/eos as the turn markers)."""


def tool_chat_tokenizer():
    """The tiny tokenizer with code characters and tool-call tags, and the ChatML-shaped template: what
    agent harnesses' tests sample with (calls in the compact format)."""
    from rlvr.models.tiny import build_tokenizer

    tok = build_tokenizer(code_chars=True, tool_tags=True)
    tok.chat_template = CHATML
    return tok


def chatty_tiny(
    hidden: int = 64,
    layers: int = 2,
    heads: int = 2,
    steps: int = 60,
    seed: int = 0,
    tok=None,
    max_positions: int = 512,
    turn: str = "{}",
    system: str = "",
):
    """A tiny model taught in a few steps to speak in short turns: a few digits (in `turn`'s {}), then
    eos, turn after turn with `ok` in between, so sampled episodes have several turns that end with eos.
    `system`: a system message before every prompt it learns from (a harness's long preamble, whose
    positions and text it will see)."""
    import random

    from rlvr.models.tiny import build_tiny_model, build_tokenizer
    from rlvr.records import Problem
    from rlvr.train.sft import sft_pairs, train_sft

    tok = tok or build_tokenizer()
    model = build_tiny_model(tok, hidden, layers, heads, max_positions=max_positions, seed=seed)
    rng = random.Random(seed)

    def prompt(i: int):
        question = f"{i % 10}+{i % 7}="
        return [{"role": "system", "content": system}, {"role": "user", "content": question}] if system else question

    problems = [Problem(id=str(i), prompt=prompt(i)) for i in range(200)]
    solutions = []
    for _ in problems:
        turns = []
        for _ in range(3):
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 5)))
            turns.append((turn.format(digits), True))
            turns.append(("ok\n", False))
        solutions.append(turns[:-1])
    train_sft(model, tok, sft_pairs(problems, tok, solutions), steps=steps, batch_size=16, lr=1e-2, warmup=5, seed=seed)
    model.eval()
    return model, tok


def chatter_spec(history: int = 0, message=None):
    """Episodes of up to three turns in which the environment answers every turn with the same
    message (`ok` and a newline, as chatty_tiny learnt), and a `turn` reward per step."""
    from rlvr.envs import Environment, StepResult
    from rlvr.rollout.episodes import EpisodeSpec

    said = message or {"role": "user", "content": "ok\n"}

    class Chatter(Environment):
        components = {"turn": 0.0}
        max_turns = 3

        def step(self, assistant_turn: str) -> StepResult:
            return StepResult([said], {"turn": 1.0})

    return EpisodeSpec(make_env=lambda p: Chatter(), max_turns=3, history=history)
