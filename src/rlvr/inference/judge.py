"""An LLM judge as a reward component: a generative model grades each completion against a rubric.

The rubric (reward.judges.<name>.rubric) is filled with the problem's prompt, the completion and
the gold answer and sent as one user message, to an OpenAI-compatible endpoint (another
`rlvr serve`, vLLM, a hosted API: at most `concurrency` requests in flight, each bounded by
`timeout_s`) or to a local model directory on an rlvr engine (greedy, in the trainer's process).
The last match of `score_pattern` in the answer is the score, mapped from [min_score, max_score]
to [0, 1]. A judge that does not answer in time, fails, or answers without a score in range marks
the sample invalid (a parse failure is not a 0: the completion was not judged). Verdicts are
cached per (prompt, completion). Calls, failures, timeouts, parse failures and cache hits are
counted for the step's metrics (`judge/<name>/...`).
"""

from __future__ import annotations

import json
import re
from collections import Counter, OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from rlvr.records import Problem


class JudgeError(Exception):
    """One completion could not be judged; `kind` is what the metrics count it as."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


_SLOT_RE = re.compile(r"\{(prompt|completion|answer)\}")


def fill(rubric: str, **values: str) -> str:
    """The rubric with its {prompt}, {completion} and {answer} filled in one pass: text put in a slot
    is never read again (a completion that writes `{answer}` shows the judge those words, not the gold)."""
    return _SLOT_RE.sub(lambda m: values[m.group(1)], rubric)


def _prompt_text(prompt) -> str:
    return prompt if isinstance(prompt, str) else "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


class EndpointClient:
    """Chat completions from an OpenAI-compatible endpoint, one request per completion judged."""

    def __init__(self, cfg) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        self.cfg = cfg
        self.http = httpx.Client(base_url=cfg.base_url.rstrip("/"), headers=headers, timeout=cfg.timeout_s)
        self.pool = ThreadPoolExecutor(cfg.concurrency, thread_name_prefix="judge")

    def _one(self, message: str) -> str | JudgeError:
        import httpx

        body = {
            "model": self.cfg.model,
            "messages": [{"role": "user", "content": message}],
            "max_tokens": self.cfg.max_tokens,
            "temperature": self.cfg.temperature,
        }
        try:
            r = self.http.post("/chat/completions", json=body)
        except httpx.TimeoutException as exc:
            return JudgeError("timeouts", f"no answer within {self.cfg.timeout_s} s ({type(exc).__name__})")
        except httpx.HTTPError as exc:
            return JudgeError("failures", f"{type(exc).__name__}: {exc}")
        if r.status_code != 200:
            return JudgeError("failures", f"HTTP {r.status_code}: {r.text[:200]}")
        try:
            return r.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return JudgeError("failures", f"not a chat completion ({type(exc).__name__}: {exc})")

    def complete(self, messages: list[str]) -> list[str | JudgeError]:
        return list(self.pool.map(self._one, messages))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.http.close()


class LocalClient:
    """A local model directory on an rlvr engine (greedy), the rubric through its chat template."""

    def __init__(self, cfg, device: str) -> None:
        # a judge on a local model only: rlvr.models and rlvr.rollout (transformers, torch) would take the module's
        # import from 0.03 s to 5.1 s for every judge at an endpoint
        from rlvr.config.rollout import RolloutConfig
        from rlvr.models import load_model
        from rlvr.rollout import build_engine
        from rlvr.rollout.engine import SamplingParams

        self.cfg = cfg
        model, tokenizer = load_model(cfg.model)
        self.engine = build_engine(RolloutConfig(), model.to(device), tokenizer, name="loop")
        self.params = SamplingParams(group_size=1, max_new_tokens=cfg.max_tokens, greedy=True)
        self.chat = getattr(tokenizer, "chat_template", None) is not None

    def complete(self, messages: list[str]) -> list[str | JudgeError]:
        problems = [
            Problem(id=str(i), prompt=[{"role": "user", "content": m}] if self.chat else m)
            for i, m in enumerate(messages)
        ]
        try:
            return [c.text for c in self.engine.generate(problems, self.params)]
        except Exception as exc:  # noqa: BLE001 - the samples are invalid, the run goes on
            return [JudgeError("failures", f"{type(exc).__name__}: {exc}")] * len(messages)

    def close(self) -> None:
        pass


class Judge:
    """One `reward.judges.<name>` entry: score(problems, texts) -> a score in [0, 1] or a JudgeError each."""

    def __init__(self, name: str, cfg, device: str = "cpu", client=None) -> None:
        self.name, self.cfg = name, cfg
        self.client = client or (EndpointClient(cfg) if cfg.base_url else LocalClient(cfg, device))
        self.pattern = re.compile(cfg.score_pattern)
        self.cache: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.counts: Counter = Counter()
        self.replies: dict[int, str] = {}  # the last call's answers by position, for info

    def parse(self, reply: str) -> float | JudgeError:
        found = self.pattern.findall(reply)
        if not found:
            return JudgeError("parse_failures", f"no score in the judge's answer {reply[-120:]!r}")
        raw = found[-1][0] if isinstance(found[-1], tuple) else found[-1]
        try:
            value = float(raw)
        except ValueError:
            return JudgeError("parse_failures", f"score {raw!r} is not a number")
        lo, hi = self.cfg.min_score, self.cfg.max_score
        if not lo <= value <= hi:
            return JudgeError("parse_failures", f"score {value} outside [{lo}, {hi}]")
        return (value - lo) / (hi - lo)

    def score(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[float | JudgeError]:
        keys = [(json.dumps(p.prompt, ensure_ascii=False), t) for p, t in zip(problems, texts)]
        out: list[float | JudgeError | None] = [self.cache.get(k) for k in keys]
        self.counts["cache_hits"] += sum(v is not None for v in out)
        todo = [i for i, v in enumerate(out) if v is None]
        messages = [
            fill(
                self.cfg.rubric,
                prompt=_prompt_text(problems[i].prompt),
                completion=texts[i],
                answer=str(problems[i].answer or ""),
            )
            for i in todo
        ]
        self.counts["calls"] += len(todo)
        self.replies = {}
        for i, reply in zip(todo, self.client.complete(messages) if todo else []):
            if isinstance(reply, str):
                self.replies[i] = reply
                reply = self.parse(reply)
            if isinstance(reply, JudgeError):
                self.counts[reply.kind] += 1
            else:
                self.cache[keys[i]] = reply
                while len(self.cache) > self.cfg.cache_size:
                    self.cache.popitem(last=False)
            out[i] = reply
        return out  # type: ignore[return-value]

    def metrics(self) -> dict[str, float]:
        out = {
            f"judge/{self.name}/{k}": float(self.counts[k])
            for k in ("calls", "failures", "timeouts", "parse_failures", "cache_hits")
        }
        self.counts.clear()
        return out

    def close(self) -> None:
        self.client.close()
