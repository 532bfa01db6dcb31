"""Learned rewards in the inference module: reward models scoring prompt + completion, and LLM
judges (rlvr.inference.judge).

    reward = with_learned_rewards(rule_reward(cfg), cfg.reward, device)   # rlvr.assembly.rule_reward: the rules
    results = reward.score(problems, texts, group_ids=...)   # the rule components, then each model's

A reward model is a Hugging Face sequence-classification model with one output
(`AutoModelForSequenceClassification`, `num_labels=1`; `rlvr rm train` writes one). It reads the
prompt and the completion rendered with its own tokenizer's chat template (the completion as the
assistant's turn), in batches, on the run's device. Its score becomes the component
`reward/<name>` after normalisation, weighted into the total beside the rule components:

- 'sigmoid' (default): sigma(score), in (0, 1) like the rule components (the preference probability
  against a completion scored 0). Once the model no longer tells the batch's completions apart
  (the policy has learned what it prefers), the differences it adds shrink with it.
- 'batch': standardised over the step's valid samples (mean 0, std 1). A Bradley-Terry score is
  defined only up to a constant, so its ranking of the batch is what it knows; but a saturated
  model's noise is blown up to unit variance and competes with the verifier (measured: it drove
  held-out correctness down; docs/benchmarks.md, "Learned rewards").
- 'none': the raw score.

A model that fails on a batch (an exception, a non-finite score) marks that batch's samples
invalid, with the error; the run goes on (invalid samples are counted and left out of the loss).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from rlvr.config.reward import RewardConfig
from rlvr.configlib import ConfigError
from rlvr.models.loading import _pretrained, load_tokenizer
from rlvr.records import Message, Problem, RewardResult
from rlvr.rewards.scorer import ComponentScorer, EnvOutcome, Scorer
from rlvr.algos.standardize import standardize


def render_pair(tokenizer, prompt: str | list[Message], completion: str) -> str:
    """Prompt + completion as a reward model reads them: through its chat template (a text prompt as
    the user's message, the completion as the assistant's turn), or concatenated without one."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        return tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": completion}], tokenize=False)
    text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
    return text + completion


def load_reward_model(path: str, device: str = "cpu"):
    """(model, tokenizer) of a reward model directory: one output, fp32, eval mode, padding known."""
    from transformers import AutoModelForSequenceClassification

    tokenizer = load_tokenizer(path)
    tokenizer.truncation_side = "left"  # a long prompt loses its start, never the completion's end
    model = _pretrained(AutoModelForSequenceClassification, str(path), dtype=torch.float32)
    if model.config.num_labels != 1:
        raise ConfigError(
            f"{path}: a reward model has one output (num_labels=1), this one has {model.config.num_labels}"
        )
    model.config.pad_token_id = tokenizer.pad_token_id  # the score is read at the last non-pad token
    return model.to(device).eval().requires_grad_(False), tokenizer


@torch.no_grad()
def score_texts(model, tokenizer, texts: Sequence[str], *, batch_size: int, max_length: int) -> list[float]:
    """The model's scalar for each rendered text, in order."""
    out: list[float] = []
    for start in range(0, len(texts), batch_size):
        enc = tokenizer(
            list(texts[start : start + batch_size]),
            padding=True,
            truncation=True,
            max_length=max_length,
            add_special_tokens=False,
            return_tensors="pt",
        ).to(model.device)
        out += model(**enc).logits[:, 0].float().tolist()  # (B,)
    return out


class RewardModel:
    """One `reward.models.<name>` entry, loaded once."""

    def __init__(self, name: str, cfg, device: str):
        self.name, self.cfg = name, cfg
        self.model, self.tokenizer = load_reward_model(cfg.path, device)

    def score(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[float | Exception]:
        """Each text's score, or the exception its batch raised (those samples are invalid)."""
        out: list[float | Exception] = []
        size = self.cfg.batch_size
        for start in range(0, len(texts), size):
            rendered = [
                render_pair(self.tokenizer, p.prompt, t)
                for p, t in zip(problems[start : start + size], texts[start : start + size])
            ]
            try:
                out += score_texts(
                    self.model, self.tokenizer, rendered, batch_size=size, max_length=self.cfg.max_length
                )
            except Exception as exc:  # noqa: BLE001 - the batch's samples are invalid, the run goes on
                out += [exc] * len(rendered)
        return out


def normalize(scores: list[float], valid: list[bool], how: str) -> list[float]:
    """A reward model's scores as its component: 'sigmoid', 'none' (raw), or 'batch' (standardised over
    the step's valid samples; the invalid ones 0)."""
    if how == "sigmoid":
        return [1 / (1 + math.exp(-max(-60.0, min(60.0, s)))) for s in scores]
    if how == "none":
        return list(scores)
    return standardize(scores, [0] * len(scores), valid)


class LearnedReward:
    """The rule reward (rlvr.rewards.Reward, or anything with its `score`) plus learned components."""

    def __init__(self, rules: Scorer, models: dict[str, ComponentScorer]):
        self.rules, self.models = rules, models
        self._raw: dict[str, list[float]] = {}
        self._failures = dict.fromkeys(models, 0)

    @property
    def weights(self) -> dict[str, float]:
        return getattr(self.rules, "weights", {})

    @property
    def learned_weights(self) -> dict[str, float]:
        """Each learned component's weight in the total (its advantage is taken on its own:
        rlvr.algos.decoupled_advantages)."""
        return {name: m.cfg.weight for name, m in self.models.items()}

    def score(
        self,
        problems: Sequence[Problem],
        texts: Sequence[str],
        group_ids: Sequence[Any] | None = None,
        env: Sequence[EnvOutcome] | None = None,
    ) -> list[RewardResult]:
        outcomes = {} if env is None else {"env": env}  # a rules scorer of a single-turn run may take no env=
        results = self.rules.score(problems, texts, group_ids=group_ids, **outcomes)
        for r in results:
            r.rules_total = r.total
        for name, m in self.models.items():
            try:
                scores: list[Any] = m.score(problems, texts)
            except Exception as exc:  # noqa: BLE001 - a scorer that fails as a whole: every sample invalid
                scores = [exc] * len(texts)
            raw: list[float | None] = []
            for r, x in zip(results, scores):
                if isinstance(x, (int, float)) and not math.isfinite(x):
                    x = ValueError(f"non-finite score {x}")
                if isinstance(x, Exception):
                    self._failures[name] += 1
                    if r.valid:
                        r.valid, r.total = False, 0.0
                        r.error = f"{name}: {type(x).__name__}: {x}"
                    raw.append(None)
                else:
                    raw.append(float(x))
            valid = [r.valid and x is not None for r, x in zip(results, raw)]
            values = normalize([x if x is not None else 0.0 for x in raw], valid, m.cfg.normalize)
            replies = getattr(m, "replies", {})
            for i, (r, x, v, ok) in enumerate(zip(results, raw, values, valid)):
                r.components[name] = v if ok else 0.0
                if x is not None:
                    r.info[f"{name}_raw"] = x
                if i in replies:
                    r.info[f"{name}_reply"] = replies[i]
                if ok:
                    r.total += m.cfg.weight * v
            self._raw.setdefault(name, []).extend(x for x, ok in zip(raw, valid) if ok)
        return results

    def metrics(self) -> dict[str, float]:
        """The rule reward's figures, and per model since the last call: its raw score's mean and the
        samples it failed on (`reward/<name>/raw_mean`, `.../failed`)."""
        out = dict(getattr(self.rules, "metrics", dict)())
        for name in self.models:
            raw = self._raw.pop(name, [])
            if raw:
                out[f"reward/{name}/raw_mean"] = sum(raw) / len(raw)
            out[f"reward/{name}/failed"] = float(self._failures[name])
            self._failures[name] = 0
            out.update(getattr(self.models[name], "metrics", dict)())
        return out

    def close(self) -> None:
        for m in self.models.values():
            getattr(m, "close", lambda: None)()
        self.rules.close()

    def __enter__(self) -> LearnedReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def learned_components(reward: RewardConfig, device: str) -> dict[str, Any]:
    """The section's `reward.models` (each loaded on its device; 'auto': `device`, the run's) and
    `reward.judges`, by component name."""
    from rlvr.inference.judge import Judge

    out: dict[str, Any] = {
        name: RewardModel(name, m, device if m.device == "auto" else m.device) for name, m in reward.models.items()
    }
    out.update({name: Judge(name, j, device) for name, j in reward.judges.items()})
    return out


def with_learned_rewards(rules, reward: RewardConfig, device: str):
    """`rules` as it is when no learned reward is configured, else wrapped with them (on `device`)."""
    return LearnedReward(rules, learned_components(reward, device)) if reward.models or reward.judges else rules
