"""Sections task, data and sft: the problems a run trains on and its cold start (rlvr.tasks, rlvr.train.sft)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlvr.configlib import require


@dataclass
class TaskConfig:
    name: str = "arithmetic"
    """Built-in task ('arithmetic', 'code'; several together joined by '+': 'arithmetic+code', mixed
    by data.mix or math:code 6:4), a path to a data file, or 'verifiers': the dataset of the
    verifiers environment env.name=verifiers:<id> names."""
    min_digits: int = 2
    max_digits: int = 3
    ops: list[str] = field(default_factory=lambda: ["+"])
    """Operators used by the arithmetic task: any of '+', '-', '*'."""
    eval_size: int = 500
    """Held-out problems, never used in training."""


@dataclass
class DataConfig:
    """Training data files (rlvr.tasks.files). Each record: `prompt` (text) or `messages` (chat),
    `answer` and/or `tests`, optional `id`, `source`, `verifier`, `metadata`, and a worked `solution`
    (or chat messages ending with an assistant turn) for the cold start (sft.*)."""

    files: list[str] = field(default_factory=list)
    """JSONL files, Parquet files or local Hugging Face `datasets` directories (save_to_disk). When
    set, they replace the built-in task; task.name may also be a single data file."""
    mix: dict[str, float] = field(default_factory=dict)
    """Share of training draws per source, e.g. {math: 6, code: 4}; a record's source is its
    `source` field, else its file's name. Empty: every record equally often."""
    on_bad_record: Literal["error", "skip"] = "error"
    """A malformed line, missing field or wrong type: stop with FILE:LINE ('error'), or skip it,
    logging each skipped line to events.jsonl and counting them ('skip')."""
    eval_size: int = 32
    """Records held out for evaluation, drawn per source in proportion (fixed by the seed);
    never trained on."""
    system_prompt: str | None = None
    """A system message put before every chat prompt that has none."""
    chat: bool = True
    """Wrap plain-text prompts as a user message, so the tokenizer's chat template is applied
    (with the generation prompt). false: feed text prompts to the model as they are."""
    max_prompt_tokens: int = 1024
    """Longest rendered prompt (chat template included), in tokens."""
    on_long_prompt: Literal["error", "skip", "truncate"] = "error"
    """A longer prompt: stop naming it ('error'), leave it out ('skip'), or cut the start of its
    last message to fit ('truncate'). Skips and cuts are counted and logged, never silent."""

    def __post_init__(self) -> None:
        require(
            self.eval_size >= 1, "eval_size", f"must be >= 1 (the run evaluates before and after), got {self.eval_size}"
        )
        require(self.max_prompt_tokens >= 1, "max_prompt_tokens", f"must be >= 1, got {self.max_prompt_tokens}")
        bad = {k: v for k, v in self.mix.items() if not v >= 0}
        require(not bad, "mix", f"shares must be >= 0, got {bad}")
        require(not self.mix or sum(self.mix.values()) > 0, "mix", "at least one share must be > 0")


@dataclass
class SFTConfig:
    steps: int = 1000
    batch_size: int = 32
    """1000 steps of 32 cost less than 500 of 64 and teach the tiny model to copy digits on every seed."""
    lr: float = 3e-3
    warmup: int = 20
    examples: int = 20000
    """Demonstrations for cold-start SFT: generated from the built-in task (disjoint from the held-out
    set), or at most this many of the data files' worked solutions (`solution`, or chat messages ending
    with an assistant turn; drawn with the seed, held-out records never)."""
    teacher_error: float = 0.6
    """The built-in tasks' imperfect teacher's error rate: the chance that an arithmetic demonstration
    forgets each carry/borrow; a code demonstration writes its family's misconception with this x
    level / 2. With data files the records' solutions are the demonstrations (setting it: a config error)."""
    cache_dir: str = ".cache/sft"
    """SFT checkpoints are cached here keyed by their config, so a second run reuses them. A URL
    (s3://bucket/sft, ...) shares them between machines: trained where missing, then uploaded."""
