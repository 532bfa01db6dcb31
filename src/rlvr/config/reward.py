"""Configuration of the reward module (section `reward`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from rlvr.configlib import require
from rlvr.config.code import CodeConfig

EXTRACT_POLICIES = ("answer_tag", "boxed", "answer_line", "gsm8k", "last_number")
DEFAULT_WEIGHTS = {"format": 0.1, "correct": 1.0}
BUILTIN_COMPONENTS = frozenset({"format", "correct", "process"})


@dataclass
class MathConfig:
    extract: list[str] = field(default_factory=lambda: ["answer_tag", "boxed", "answer_line", "gsm8k"])
    """Answer extraction policies: every final-answer marker of every listed policy counts (two that
    disagree are several answers), each read in its context (rlvr.rewards.context); where two overlap,
    the policy listed first reads it. Any of 'answer_tag' (<answer>...</answer>), 'boxed' (\\boxed{...}),
    'answer_line' ('Answer: ...', 'the answer is ...'), 'gsm8k' ('#### N'), and 'last_number' (opt-in
    fallback, read only when no marker is found: the last number)."""
    rel_tol: float = 1e-6
    """Relative tolerance when a decimal or irrational number is involved. Two integers,
    or an integer against a decimal, are always compared exactly."""
    abs_tol: float = 0.0
    """Absolute tolerance added to rel_tol (0: tiny numbers are never equal to each other by accident)."""
    timeout_s: float = 5.0
    """Hard wall-clock budget per completion, extraction and equivalence together: what extraction
    took in this process is charged first, and the worker verifying the rest is killed when the
    budget runs out; the sample is then marked invalid (reward 0, flag `timeout`)."""
    workers: int = 2
    """Verification worker processes (started lazily, only when an answer needs math-verify)."""
    worker_memory_mb: int = 2048
    """Address-space limit of each worker, so a pathological answer cannot exhaust memory."""
    max_answer_chars: int = 1000
    """An extracted answer longer than this is a parse failure, not a verification: math answers are
    short, and math-verify's parser takes seconds on a few thousand characters of junk."""
    max_chars: int = 400_000
    """A completion longer than this (about 100k tokens of English) scores 0 with flag `too_long`,
    counted in `reward/too_long_frac`, without being searched. Extraction is linear in the length
    (about 15 ms per 200 KB), so this bounds the work per completion, not a slow path."""

    def __post_init__(self) -> None:
        unknown = [p for p in self.extract if p not in EXTRACT_POLICIES]
        if unknown or not self.extract:
            raise ValueError(f"extract: unknown policy {unknown or '[]'}; choose from {', '.join(EXTRACT_POLICIES)}")
        if self.rel_tol < 0 or self.abs_tol < 0:
            raise ValueError("rel_tol and abs_tol must be >= 0")
        if self.timeout_s <= 0 or self.workers < 1:
            raise ValueError("timeout_s must be > 0 and workers >= 1")
        if self.max_chars < 1 or self.max_answer_chars < 1:
            raise ValueError("max_chars and max_answer_chars must be >= 1")


@dataclass
class FormatConfig:
    kind: Literal["think_answer", "answer", "regex", "json", "none"] = "think_answer"
    """'think_answer': exactly one <think> block then one <answer> block, nothing after;
    'answer': exactly one <answer> block; 'regex': `pattern` must match the whole text;
    'json': the answer (or the whole text) is JSON valid against `json_schema`; 'none': always 1."""
    pattern: str | None = None
    """Regular expression for kind 'regex' (full match, DOTALL)."""
    json_schema: str | None = None
    """JSON Schema for kind 'json': inline JSON text or a path to a .json file."""
    code_kind: Literal["code_block", "think_code_block", "same", "none"] = "code_block"
    """The format of an answer to a problem whose verifier is 'code' (`kind` is the math one):
    'code_block': exactly one non-empty ```python block, free text before it, nothing after;
    'think_code_block': one <think> block, then that one code block; 'same': `kind` for code too;
    'none': always 1."""

    def __post_init__(self) -> None:
        if self.kind == "regex" and not self.pattern:
            raise ValueError("kind: 'regex' needs reward.format.pattern")
        for key, kind in (("pattern", "regex"), ("json_schema", "json")):  # read by that kind only
            if getattr(self, key) and self.kind != kind:
                raise ValueError(
                    f"{key}: read by reward.format.kind={kind} only, and kind is {self.kind!r}: "
                    f"set kind={kind} or drop {key}"
                )


@dataclass
class ProcessConfig:
    """The process component (computed when reward.weights.process is set; rlvr.rewards.process)."""

    scorer: str = "arithmetic"
    """'arithmetic': each worked equality of the reasoning is a step, scoring 1 when true and
    grounded in the problem (operands from the prompt, its digits, or earlier steps); or a function
    'module:name' taking (steps, problem) -> a score in [0, 1] or None (not checkable) per step,
    the steps being the reasoning's non-empty lines (a rule of yours, or a model you call)."""
    aggregate: Literal["min", "mean"] = "min"
    """'min' (default): a derivation is as sound as its weakest step, so one wrong step costs the
    chain; 'mean': partial credit per step."""


@dataclass
class MonitorConfig:
    stuck_steps: int = 5
    """Alert when a source's outcome reward is 0 for this many consecutive steps while
    other sources score above 0: the signature of a verifier/data mismatch."""


@dataclass
class RewardModelConfig:
    """A learned reward: a sequence-classification model with one output scoring prompt + completion
    (rlvr.inference.reward_models); its component is reward/<name>, weighted into the total."""

    path: str = ""
    """The model directory (AutoModelForSequenceClassification, num_labels=1; `rlvr rm train` writes one)."""
    weight: float = 0.1
    """Its weight in the total, beside reward.weights (format small, outcome dominant: keep it small)."""
    normalize: Literal["sigmoid", "batch", "none"] = "sigmoid"
    """'sigmoid' (default): sigma(score), in (0, 1) like the rule components, so a model that no longer
    tells the batch's completions apart adds next to nothing; 'batch': standardised over the step's
    valid samples, which blows a saturated model's noise up to unit variance (measured: it swamped
    correctness, docs/benchmarks.md); 'none': the raw score."""
    batch_size: int = 16
    """Sequences per forward pass."""
    max_length: int = 1024
    """Tokens read per sequence (a longer one loses the start of its prompt, never the completion)."""
    device: str = "auto"
    """'auto': the run's device (train.device); or 'cpu', 'cuda', 'cuda:1'."""

    def __post_init__(self) -> None:
        require(bool(self.path), "path", "the reward model's directory is required")
        require(
            self.batch_size >= 1 and self.max_length >= 1,
            "batch_size",
            f"batch_size and max_length must be >= 1, got {self.batch_size} and {self.max_length}",
        )


JUDGE_RUBRIC = """You are grading an answer to a problem.

Problem:
{prompt}

Reference answer: {answer}

Answer to grade:
{completion}

Grade the answer from 0 (wrong or useless) to 10 (correct, clear and complete). End with a line
of the form "Score: N"."""


@dataclass
class JudgeConfig:
    """An LLM judge: a generative model grades each completion against a rubric and its score,
    parsed from the answer, becomes the component reward/<name> (rlvr.inference.judge)."""

    base_url: str | None = None
    """An OpenAI-compatible endpoint (`http://host:8000/v1`: another `rlvr serve`, vLLM, a hosted
    API). None: `model` is a local model directory, run on an rlvr engine in the trainer's process."""
    model: str = ""
    """The endpoint's model name, or the local model directory."""
    api_key: str | None = None
    """Sent as a bearer token (redacted in every run file; set it with ${secret:VAR})."""
    rubric: str = JUDGE_RUBRIC
    """The judge's prompt (one user message): {prompt}, {completion} and {answer} are filled in."""
    score_pattern: str = r"(?i)score\s*[:=]\s*(-?\d+(?:\.\d+)?)"
    """A regex whose first group is the score; the last match in the judge's answer counts. No
    match, or a score outside [min_score, max_score]: the sample is invalid (never scored 0)."""
    min_score: float = 0.0
    max_score: float = 10.0
    """The rubric's range, mapped to [0, 1]."""
    weight: float = 0.1
    """Its weight in the total, beside reward.weights."""
    normalize: Literal["none", "batch"] = "none"
    """'none': the rubric's score mapped to [0, 1]; 'batch': standardised over the step's valid samples."""
    max_tokens: int = 256
    temperature: float = 0.0
    timeout_s: float = 60.0
    """Per request; one that takes longer marks its sample invalid."""
    concurrency: int = 8
    """Requests in flight at once (endpoint judges)."""
    cache_size: int = 10000
    """Verdicts kept per (prompt, completion), so a repeated completion is not judged twice."""

    def __post_init__(self) -> None:
        require(bool(self.model), "model", "the judge's model (endpoint model name, or a local directory) is required")
        require(self.max_score > self.min_score, "max_score", f"must be above min_score={self.min_score}")
        require(
            self.timeout_s > 0 and self.concurrency >= 1 and self.max_tokens >= 1,
            "timeout_s",
            "timeout_s must be > 0, concurrency and max_tokens >= 1",
        )
        try:
            groups = re.compile(self.score_pattern).groups
        except re.error as exc:
            raise ValueError(f"score_pattern: not a regex ({exc})") from None
        require(groups >= 1, "score_pattern", "needs a group capturing the score, e.g. 'Score: (\\d+)'")
        missing = [k for k in ("{prompt}", "{completion}") if k not in self.rubric]
        require(not missing, "rubric", f"must contain {' and '.join(missing)}")


@dataclass
class RewardConfig:
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    """Component name -> weight in the total. Format small, outcome dominant. Components:
    'format', 'correct' (the outcome), 'process' (computed only when weighted here), and the
    environment's own (env.name; their defaults are the environment's). Keys you give are merged
    over the defaults (`reward.weights.process=0.2` adds process; `reward.weights.format=0` turns
    format off)."""
    normalize: Literal["none", "group"] = "none"
    """'group': standardise each component within its group (mean 0, std 1) before the
    weighted sum, so components with different ranges don't swamp each other."""
    math: MathConfig = field(default_factory=MathConfig)
    format: FormatConfig = field(default_factory=FormatConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    process: ProcessConfig = field(default_factory=ProcessConfig)
    code: CodeConfig = field(default_factory=CodeConfig)
    """The code verifier (rlvr.sandbox), used by problems with verifier 'code'."""
    models: dict[str, RewardModelConfig] = field(default_factory=dict)
    """Learned reward models by component name: `reward.models.helpful.path=DIR` adds the component
    'helpful' (rlvr.inference.reward_models), scored in the trainer's process on the run's device."""

    judges: dict[str, JudgeConfig] = field(default_factory=dict)
    """LLM judges by component name: `reward.judges.clarity.base_url=http://host:8000/v1`,
    `...model=NAME` adds the component 'clarity' (rlvr.inference.judge)."""

    def __post_init__(self) -> None:
        self.weights = {**DEFAULT_WEIGHTS, **self.weights}
        for key, names in (("models", set(self.models)), ("judges", set(self.judges))):
            clash = sorted(names & (BUILTIN_COMPONENTS | set(self.weights)))
            require(not clash, key, f"{clash} already name rule components; give them other names")
        both = sorted(set(self.models) & set(self.judges))
        require(not both, "judges", f"{both} also name reward models; give each component its own name")
