"""Reward models from preference pairs: Bradley-Terry training (`rlvr rm train`) and pair accuracy.

A pairs file is JSONL, one preference per line, in either of the shapes TRL's reward trainer reads:

    {"prompt": "12+345=" | [messages], "chosen": "<completion>", "rejected": "<completion>"}
    {"chosen": [..., {"role": "assistant", ...}], "rejected": [..., {"role": "assistant", ...}]}

(the second: the conversation up to the last assistant turn is the shared prompt; with a `prompt`
too, `chosen`/`rejected` may be lists holding the assistant's turn). The model is the base model
with a one-output score head (AutoModelForSequenceClassification, num_labels=1), trained on
-log sigmoid(r(chosen) - r(rejected)) (Bradley & Terry 1952; the InstructGPT reward model,
Ouyang et al. 2022, arXiv:2203.02155), fully or with LoRA; it reads prompt + completion exactly as
the learned reward component does (rlvr.inference.reward_models.render_pair).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.inference.reward_models import render_pair, score_texts
from rlvr.models.loading import _pretrained, load_tokenizer, save_model
from rlvr.records import Message
from rlvr.tasks.files import DataError


@dataclass(frozen=True)
class Pair:
    prompt: str | list[Message]
    chosen: str
    rejected: str
    where: str


def _completion(value: Any, field: str) -> tuple[list[Message] | None, str]:
    """(the conversation before the assistant's turn or None, the assistant's text) of chosen/rejected."""
    if isinstance(value, str) and value.strip():
        return None, value
    if isinstance(value, list) and value and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in value):
        if value[-1]["role"] == "assistant" and isinstance(value[-1]["content"], str):
            return [{"role": m["role"], "content": m["content"]} for m in value[:-1]], value[-1]["content"]
    raise ValueError(
        f"field {field!r}: expected a non-empty completion, or chat messages ending with the assistant's turn"
    )


def parse_pair(obj: Any, where: str) -> Pair:
    if not isinstance(obj, dict) or "chosen" not in obj or "rejected" not in obj:
        raise ValueError("expected an object with 'chosen' and 'rejected' (and 'prompt', unless they are chats)")
    (c_ctx, chosen), (r_ctx, rejected) = _completion(obj["chosen"], "chosen"), _completion(obj["rejected"], "rejected")
    prompt = obj.get("prompt")
    if prompt is None:
        if not c_ctx or c_ctx != r_ctx:
            raise ValueError("without 'prompt', 'chosen' and 'rejected' must be chats sharing every turn but the last")
        prompt = c_ctx
    elif not (isinstance(prompt, str) and prompt.strip()) and not (isinstance(prompt, list) and prompt):
        raise ValueError("field 'prompt': expected text or chat messages")
    elif c_ctx or r_ctx:
        prompt = (list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": prompt}]) + (c_ctx or [])
    return Pair(prompt, chosen, rejected, where)


def load_pairs(path: str | Path) -> list[Pair]:
    """Every pair of a JSONL file; a bad line stops with FILE:LINE and what to fix."""
    pairs = []
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                pairs.append(parse_pair(json.loads(line), f"{path}:{n}"))
            except (ValueError, json.JSONDecodeError) as exc:
                raise DataError(f"{path}:{n}: {exc}") from None
    if not pairs:
        raise DataError(f"{path}: no preference pairs")
    return pairs


def pair_scores(
    model, tokenizer, pairs: list[Pair], *, batch_size: int = 16, max_length: int = 1024
) -> tuple[list[float], list[float]]:
    """(score of each chosen, score of each rejected)."""
    chosen = score_texts(
        model,
        tokenizer,
        [render_pair(tokenizer, p.prompt, p.chosen) for p in pairs],
        batch_size=batch_size,
        max_length=max_length,
    )
    rejected = score_texts(
        model,
        tokenizer,
        [render_pair(tokenizer, p.prompt, p.rejected) for p in pairs],
        batch_size=batch_size,
        max_length=max_length,
    )
    return chosen, rejected


def pair_accuracy(model, tokenizer, pairs: list[Pair], **kwargs) -> dict[str, float]:
    """The share of pairs whose chosen completion scores above the rejected one (ties count half),
    and the mean margin."""
    was_training = model.training
    model.eval()
    c, r = pair_scores(model, tokenizer, pairs, **kwargs)
    model.train(was_training)
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(c, r))
    return {
        "pair_accuracy": wins / len(pairs),
        "margin_mean": sum(a - b for a, b in zip(c, r)) / len(pairs),
        "n": len(pairs),
    }


def train_reward_model(
    base: str | Path,
    pairs: list[Pair],
    out: str | Path,
    *,
    steps: int = 200,
    batch_size: int = 16,
    lr: float = 1e-4,
    eval_frac: float = 0.1,
    seed: int = 0,
    lora: bool = False,
    max_length: int = 1024,
    on_step=None,
) -> dict[str, Any]:
    """Train a reward model from `base` on `pairs` (a seeded `eval_frac` of them held out) and export it
    to `out` in Hugging Face format; the held-out pair accuracy before and after is in the report
    (also written to out/rm.json)."""
    from transformers import AutoModelForSequenceClassification

    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    n_eval = max(1, round(eval_frac * len(pairs))) if eval_frac > 0 and len(pairs) > 1 else 0
    held, train = [pairs[i] for i in order[:n_eval]], [pairs[i] for i in order[n_eval:]]
    torch.manual_seed(seed)
    tokenizer = load_tokenizer(base)
    tokenizer.truncation_side = "left"
    model = _pretrained(AutoModelForSequenceClassification, str(base), num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=16, lora_alpha=32, target_modules="all-linear"))
    before = pair_accuracy(model, tokenizer, held, max_length=max_length) if held else None
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for step in range(steps):
        batch = rng.sample(train, min(batch_size, len(train)))
        texts = [render_pair(tokenizer, p.prompt, p.chosen) for p in batch] + [
            render_pair(tokenizer, p.prompt, p.rejected) for p in batch
        ]
        enc = tokenizer(
            texts, padding=True, truncation=True, max_length=max_length, add_special_tokens=False, return_tensors="pt"
        )
        scores = model(**enc).logits[:, 0].float()  # (2B,)
        loss = -F.logsigmoid(scores[: len(batch)] - scores[len(batch) :]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, loss.item())
    after = pair_accuracy(model, tokenizer, held, max_length=max_length) if held else None
    if lora:
        model = model.merge_and_unload()
    save_model(model, tokenizer, Path(out))
    report = {
        "base": str(base),
        "pairs": len(pairs),
        "train_pairs": len(train),
        "held_out_pairs": len(held),
        "steps": steps,
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "held_out_before": before,
        "held_out_after": after,
        "lora": lora,
    }
    (Path(out) / "rm.json").write_text(json.dumps(report, indent=2))
    return report
