"""Cold-start SFT: teach the output format and a first, partial skill.

The loss covers completion tokens only (the prompt is given, not learned).
The resulting checkpoint is cached under `sft.cache_dir`, keyed by every
setting that shapes it, so a second `rlvr train` starts RL immediately.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from rlvr.config import Config
from rlvr.configlib import to_dict
from rlvr.models import load_model, save_model
from rlvr.models.tiny import save_tiny
from rlvr.records import Problem
from rlvr.tasks import build_task, needs_code_chars, needs_tool_tags, teacher_solution
from rlvr.scoring import completion_logits, compute, pack
from rlvr.train.lr import lr_factor
from rlvr.train.parallel import train_device


def base_model_path(cfg: Config) -> Path:
    """The starting weights: the tiny model (built locally once) or a user's model."""
    if cfg.model.name != "tiny":
        from rlvr.models import resolve_model  # a directory, hub id, GGUF (dequantized once) or packaged model
        return Path(resolve_model(cfg.model))
    m = cfg.model
    code, tools = needs_code_chars(cfg), needs_tool_tags(cfg)
    shape = {"hidden": m.tiny_hidden, "layers": m.tiny_layers, "heads": m.tiny_heads, "seed": cfg.seed}
    # the arithmetic model keeps its key
    key = _digest(shape | ({"code_chars": True} if code else {}) | ({"tool_tags": True} if tools else {}))
    path = Path(cfg.sft.cache_dir) / f"tiny-{key}"
    if not (path / "config.json").exists():
        save_tiny(path, m.tiny_hidden, m.tiny_layers, m.tiny_heads, seed=cfg.seed, code_chars=code, tool_tags=tools)
    return path


def sft_cache_path(cfg: Config) -> Path:
    settings = {"model": to_dict(cfg.model), "task": to_dict(cfg.task), "seed": cfg.seed,
                **({"history": cfg.env.history} if cfg.env.history else {}),
                "sft": {k: v for k, v in to_dict(cfg.sft).items() if k != "cache_dir"}}
    versions = task_versions(cfg)  # generators that changed since they shipped; arithmetic keys stay
    if "code" in versions:
        settings["code_task"] = versions.pop("code")
    if versions:
        settings["task_versions"] = versions
    return Path(cfg.sft.cache_dir) / f"sft-{_digest(settings)}"


def task_versions(cfg: Config) -> dict[str, int]:
    """The VERSION of each built-in task of the run that has one (its demonstrations or prompts changed)."""
    from rlvr.tasks import builtin_names, code, games, tool_arithmetic

    modules = {"code": code, "tool_arithmetic": tool_arithmetic, "frozenlake": games, "breakout": games}
    return {n: modules[n].VERSION for n in builtin_names(cfg.task.name) or [] if n in modules}


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def sft_pairs(problems: list[Problem], tokenizer, solutions: list,
              history: int = 0) -> list[tuple[list[int], list[int], list[int]]]:
    """(prompt, target, mask) per demonstration. A solution is a text (one turn), or a trajectory of
    (text, sampled) segments: the model's turns end with eos and are learned (mask 1); what a tool or
    environment appended is context (mask 0), tokenised alone, as rollout appends it. With history
    k > 0 (env.history) each turn is a pair of its own, in the window rollout shows: the prompt and
    the last k exchanges."""
    pairs = []
    eos = tokenizer.eos_token_id
    for p, solution in zip(problems, solutions):
        prompt = tokenizer(p.prompt, add_special_tokens=False).input_ids
        segments = [(solution, True)] if isinstance(solution, str) else solution
        pieces = [(tokenizer(text, add_special_tokens=False).input_ids + ([eos] if sampled else []), sampled)
                  for text, sampled in segments]
        if history and not isinstance(solution, str):
            pairs += _windows(prompt, pieces, history)
            continue
        pairs.append((prompt, [t for ids, _ in pieces for t in ids],
                      [int(sampled) for ids, sampled in pieces for _ in ids]))
    return pairs


def _windows(prompt: list[int], pieces: list[tuple[list[int], bool]], history: int):
    """One (context, turn, mask) per sampled piece: the context is the prompt and the pieces from the
    start of the history-th turn back on (rlvr.rollout.episodes: _Trajectory.context)."""
    out, starts, flat = [], [], []
    for ids, sampled in pieces:
        if sampled:
            start = starts[-history] if len(starts) >= history else 0
            out.append((prompt + flat[start:], list(ids), [1] * len(ids)))
            starts.append(len(flat))
        flat += ids
    return out


def train_sft(model, tokenizer, pairs, *, steps: int, batch_size: int, lr: float, warmup: int, seed: int,
              on_step: Callable[[int, float], None] | None = None, dtype: str = "float32") -> list[float]:
    """Plain next-token cross-entropy on completion tokens, AdamW, warmup + cosine decay."""
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warmup)) * lr_factor(s, total=steps, schedule="cosine"))
    model.train()
    losses = []
    for step in range(steps):
        chunk = rng.sample(pairs, min(batch_size, len(pairs)))
        batch = pack([p for p, _, _ in chunk], [c for _, c, _ in chunk], tokenizer.pad_token_id,
                     [m for _, _, m in chunk]).to(model.device)
        with compute(model, dtype):
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # (B, L, V)
        logits = completion_logits(logits, batch).float()  # (B, T, V)
        nll = F.cross_entropy(logits.transpose(1, 2), batch.targets, reduction="none")  # (B, T)
        loss = (nll * batch.mask).sum() / batch.mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, loss.item())
    return losses


def run_sft(cfg: Config, out_dir: Path | None = None, on_step: Callable[[int, float], None] | None = None) -> Path:
    """Train the cold-start checkpoint (or reuse the cached one) and return its directory."""
    out = Path(out_dir) if out_dir else sft_cache_path(cfg)
    if (out / "sft.json").exists():
        return out
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_model(base_model_path(cfg), "float32")  # fp32 master weights (model.dtype: compute)
    model = model.to(train_device(cfg.train.device))
    task = build_task(cfg)
    problems = list(itertools.islice(task.train_stream(seed=10_000 + cfg.seed), cfg.sft.examples))
    s = cfg.sft
    rng = random.Random(f"teacher-{cfg.seed}")
    solutions = [teacher_solution(p, s.teacher_error, rng) for p in problems]
    pairs = sft_pairs(problems, tokenizer, solutions, cfg.env.history)
    losses = train_sft(model, tokenizer, pairs, steps=s.steps, batch_size=s.batch_size,
                       lr=s.lr, warmup=s.warmup, seed=cfg.seed, on_step=on_step, dtype=cfg.model.dtype)
    tmp = out.with_name(out.name + ".tmp")
    save_model(model, tokenizer, tmp)
    (tmp / "sft.json").write_text(json.dumps({"steps": s.steps, "final_loss": losses[-1] if losses else None}))
    tmp.rename(out)
    return out
