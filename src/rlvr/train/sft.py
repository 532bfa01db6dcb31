"""Cold-start SFT: teach the output format and a first, partial skill.

Demonstrations come from the built-in task's imperfect teacher, or from the
worked solutions data-file records carry (`solution`, or chat messages
ending with an assistant turn; held-out records never). Prompts are
rendered exactly as rollout renders them (rlvr.rollout.engine.render_prompt:
the chat template with its generation prompt), so SFT teaches the very turn
RL samples. The loss covers completion tokens only (the prompt is given,
not learned). The resulting checkpoint is cached under `sft.cache_dir`,
keyed by every setting and data byte that shapes it (rlvr.assembly.cold_start_dir),
so a second `rlvr train` starts RL immediately. rlvr.assembly.run_sft reads the
config and calls `cached`, `demonstrations` and `cold_start`.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from rlvr.config import SFTConfig
from rlvr.configlib import ConfigError
from rlvr.models import load_model, save_model
from rlvr.records import Problem
from rlvr.rollout.engine import render_prompt
from rlvr.tasks import teacher_solution
from rlvr.scoring import completion_logits, compute, pack
from rlvr.train.lr import lr_factor
from rlvr.urls import fetch_dir, filesystem, put_dir


def sft_pairs(
    problems: list[Problem], tokenizer, solutions: list, history: int = 0
) -> list[tuple[list[int], list[int], list[int]]]:
    """(prompt, target, mask) per demonstration. A solution is a text (one turn), or a trajectory of
    (text, sampled) segments: the model's turns end with eos and are learned (mask 1); what a tool or
    environment appended is context (mask 0), tokenised alone, as rollout appends it. With history
    k > 0 (env.history) each turn is a pair of its own, in the window rollout shows: the prompt and
    the last k exchanges."""
    pairs = []
    eos = tokenizer.eos_token_id
    for p, solution in zip(problems, solutions):
        prompt = render_prompt(tokenizer, p)  # as rollout feeds it: chat messages through the template
        segments = [(solution, True)] if isinstance(solution, str) else solution
        pieces = [
            (tokenizer(text, add_special_tokens=False).input_ids + ([eos] if sampled else []), sampled)
            for text, sampled in segments
        ]
        if history and not isinstance(solution, str):
            pairs += _windows(prompt, pieces, history)
            continue
        pairs.append(
            (prompt, [t for ids, _ in pieces for t in ids], [int(sampled) for ids, sampled in pieces for _ in ids])
        )
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


def train_sft(
    model,
    tokenizer,
    pairs,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    warmup: int,
    seed: int,
    on_step: Callable[[int, float], None] | None = None,
    dtype: str = "float32",
) -> list[float]:
    """Plain next-token cross-entropy on completion tokens, AdamW, warmup + cosine decay."""
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warmup)) * lr_factor(s, total=steps, schedule="cosine")
    )
    model.train()
    losses = []
    for step in range(steps):
        chunk = rng.sample(pairs, min(batch_size, len(pairs)))
        batch = pack(
            [p for p, _, _ in chunk], [c for _, c, _ in chunk], tokenizer.pad_token_id, [m for _, _, m in chunk]
        ).to(model.device)
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


def demonstrations(task, s: SFTConfig, seed: int, *, from_files: bool) -> tuple[list[Problem], list, dict[str, int]]:
    """(problems, solutions, counts) the cold start imitates: the built-in task's teacher on fresh
    problems, or (from_files) the training records of data files that carry a worked solution (at
    most sft.examples, drawn with the seed; held-out records never). Records without one are counted."""
    if not from_files:
        problems = list(itertools.islice(task.train_stream(seed=10_000 + seed), s.examples))
        rng = random.Random(f"teacher-{seed}")
        return problems, [teacher_solution(p, s.teacher_error, rng) for p in problems], {"examples": len(problems)}
    train = [p for source in sorted(task.train) for p in task.train[source]]
    solved = [p for p in train if p.solution]
    if len(solved) > s.examples:
        solved = random.Random(f"sft-{seed}").sample(solved, s.examples)
    counts = {
        "examples": len(solved),
        "without_solution": len(train) - sum(1 for p in train if p.solution),
        "held_out": len(task.held_out()),
    }
    return solved, [p.solution for p in solved], counts


def describe(counts: dict[str, int]) -> str:
    """One line on what the cold start learned from."""
    line = f"{counts['examples']} worked solution(s)"
    if "held_out" in counts:
        line += f" ({counts['held_out']} held-out record(s) never trained on)"
    if counts.get("without_solution"):
        line += (
            f"; {counts['without_solution']} training record(s) without one (a `solution` field, or chat "
            f"messages ending with an assistant turn) left out"
        )
    return line


def cached(out: Path, remote: str | None) -> Path | None:
    """The cold start already trained: at `out`, or (remote: sft.cache_dir at a URL) downloaded from
    there; None when it is to be trained. A directory at `out` that is not one is refused."""
    if (out / "sft.json").exists():
        return out
    if remote is not None:  # a cold start trained elsewhere is downloaded
        fs, path = filesystem(remote)
        if fs.exists(f"{path}/sft.json"):
            return fetch_dir(remote)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out}: exists and is not a cold-start checkpoint (no sft.json); give a new directory")
    return None


def cold_start(
    base: Path,
    problems: list[Problem],
    solutions: list,
    counts: dict[str, int],
    s: SFTConfig,
    *,
    out: Path,
    remote: str | None,
    seed: int,
    history: int,
    device,
    dtype: str,
    on_step: Callable[[int, float], None] | None = None,
) -> Path:
    """Train the base model at `base` on the demonstrations (section sft) in fp32 master weights on
    `device` and save it at `out` with its sft.json (counts: what it learned from); remote: its URL,
    uploaded to with sft.json last."""
    torch.manual_seed(seed)
    model, tokenizer = load_model(base, "float32")  # fp32 master weights (model.dtype: compute)
    model = model.to(device)
    pairs = sft_pairs(problems, tokenizer, solutions, history)
    losses = train_sft(
        model,
        tokenizer,
        pairs,
        steps=s.steps,
        batch_size=s.batch_size,
        lr=s.lr,
        warmup=s.warmup,
        seed=seed,
        on_step=on_step,
        dtype=dtype,
    )
    tmp = out.with_name(out.name + ".tmp")
    save_model(model, tokenizer, tmp)
    (tmp / "sft.json").write_text(
        json.dumps(
            {
                "steps": s.steps,
                "final_loss": losses[-1] if losses else None,
                "first_loss": losses[0] if losses else None,
                **counts,
            }
        )
    )
    if out.exists():
        out.rmdir()  # empty (checked by `cached`)
    tmp.rename(out)
    if remote is not None:
        put_dir(out, remote, last="sft.json")  # sft.json last: what readers take for the whole
    return out


def sft_info(path: Path) -> dict | None:
    """What a cold-start checkpoint recorded (sft.json), or None for another starting point."""
    f = Path(path) / "sft.json"
    return json.loads(f.read_text()) if f.exists() else None
