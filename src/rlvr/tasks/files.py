"""Data files: JSONL, Parquet, or a local Hugging Face `datasets` directory -> `Problem`s.

A record is a JSON object (a row) with

    prompt    text                        } exactly one of the two
    messages  [{"role", "content"}, ...]   }   (ending with an assistant turn: that turn is the solution)
    answer    text or number              } at least one; `verifier` says which is used
    tests     mapping (or JSON text)      }   (default: 'code' with tests only, else 'math');
                                              neither with verifier 'env' (an environment grades)
    solution  text                        optional: a worked solution, as the model should write it,
                                              for cold-start SFT (rlvr.train.sft)
    id, source, verifier                  optional text (source: default the file's name)
    metadata                              optional mapping

Every record is validated before any compute is spent. A bad one (not
JSON, not an object, a missing field, a wrong type) is reported as
FILE:LINE (FILE: row N for Parquet and datasets) with what to fix; with
`data.on_bad_record=skip` it is left out, and every skipped line is
logged and counted instead.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlvr.configlib import ConfigError
from rlvr.records import Problem
from rlvr.rewards import VERIFIERS
from rlvr.sandbox.cases import TestFormatError, parse_tests

log = logging.getLogger("rlvr.data")
ROLES = ("system", "user", "assistant")
EventFn = Callable[..., None]  # on_event(kind, **fields)


class DataError(ConfigError):
    """A data file or record is unusable; the message names the file and line."""


class RecordError(ValueError):
    """One record is malformed; the message says which field and why."""


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{n}", json.loads(line), None
            except json.JSONDecodeError as exc:
                yield f"{path}:{n}", None, f"not valid JSON: {exc.msg} (column {exc.colno})"


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise DataError(f"{path}: reading Parquet needs pyarrow: `pip install 'rlvr[data]'`") from exc
    n = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            n += 1
            yield f"{path}: row {n}", {k: v for k, v in row.items() if v is not None}, None


def _dataset_rows(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    try:
        import datasets
    except ImportError as exc:
        raise DataError(f"{path}: reading a datasets directory needs `pip install 'rlvr[data]'`") from exc
    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            raise DataError(
                f"{path}: a DatasetDict without a 'train' split (splits: {sorted(ds)}); give the split's own directory"
            )
        ds = ds["train"]
    for n, row in enumerate(ds, 1):
        yield f"{path}: row {n}", {k: v for k, v in row.items() if v is not None}, None


def data_files(path: Path) -> list[Path]:
    """The readable files behind one `data.files` entry (a directory of files is expanded)."""
    if path.is_dir():
        if any((path / marker).exists() for marker in ("state.json", "dataset_dict.json")):
            return [path]  # a `save_to_disk` directory
        found = sorted(p for p in path.rglob("*") if p.suffix in (".jsonl", ".parquet"))
        if not found:
            raise DataError(f"{path}: a directory with no .jsonl or .parquet files and no datasets state.json")
        return found
    if not path.exists():
        raise DataError(f"{path}: data file not found")
    if path.suffix not in (".jsonl", ".parquet"):
        raise DataError(f"{path}: unknown data format {path.suffix!r}; use .jsonl, .parquet or a datasets directory")
    return [path]


def read_rows(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    """(where, record or None, error or None) for every record of one file."""
    if path.is_dir():
        return _dataset_rows(path)
    return _parquet_rows(path) if path.suffix == ".parquet" else _jsonl_rows(path)


def _text(value: Any, field: str, *, numbers: bool = False) -> str:
    ok = isinstance(value, str) or (numbers and isinstance(value, (int, float)) and not isinstance(value, bool))
    if not ok:
        kinds = "text or a number" if numbers else "text"
        raise RecordError(f"field {field!r}: expected {kinds}, got {type(value).__name__} {_short(value)}")
    text = str(value)
    if not text.strip():
        raise RecordError(f"field {field!r} is empty")
    return text


def _short(value: Any) -> str:
    s = repr(value)
    return s if len(s) <= 40 else s[:37] + "..."


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise RecordError(f"field 'messages': expected a non-empty list of {{role, content}}, got {_short(value)}")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise RecordError(f"field 'messages[{i}]': expected a mapping with 'role' and 'content', got {_short(m)}")
        if m["role"] not in ROLES:
            raise RecordError(f"field 'messages[{i}].role': expected one of {', '.join(ROLES)}, got {m['role']!r}")
        if not isinstance(m["content"], str):
            raise RecordError(f"field 'messages[{i}].content': expected text, got {type(m['content']).__name__}")
        out.append({"role": m["role"], "content": m["content"]})
    if not any(m["role"] == "user" and m["content"].strip() for m in out):
        raise RecordError("field 'messages': no non-empty user message")
    return out


def _tests(value: Any) -> dict[str, Any]:
    if isinstance(value, str):  # Parquet and many hub sets keep tests as JSON text
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise RecordError(f"field 'tests': text that is not valid JSON ({exc.msg})") from None
    try:
        parse_tests(value)
    except TestFormatError as exc:
        raise RecordError(f"field {exc}") from None
    return value


def parse_record(obj: Any, where: str, default_source: str, known_verifiers: set[str]) -> Problem:
    """One record -> Problem, or RecordError naming the field."""
    if not isinstance(obj, dict):
        raise RecordError(f"expected a JSON object, got {type(obj).__name__}")
    if ("prompt" in obj) == ("messages" in obj):
        raise RecordError(
            "needs exactly one of 'prompt' (text) or 'messages' (chat)"
            + (", got both" if "prompt" in obj else ", got neither")
        )
    prompt: str | list[dict[str, str]] = (
        _text(obj["prompt"], "prompt") if "prompt" in obj else _messages(obj["messages"])
    )
    solution = _text(obj["solution"], "solution") if "solution" in obj else None
    if isinstance(prompt, list) and prompt[-1]["role"] == "assistant":
        if solution is not None:
            raise RecordError(
                "a worked solution twice: both a 'solution' field and 'messages' ending with an "
                "assistant turn; keep one"
            )
        solution = _text(prompt[-1]["content"], "messages[-1].content")
        prompt = prompt[:-1]
        if not any(m["role"] == "user" and m["content"].strip() for m in prompt):
            raise RecordError("field 'messages': no non-empty user message before the final assistant turn")
    answer = _text(obj["answer"], "answer", numbers=True) if "answer" in obj else None
    tests = _tests(obj["tests"]) if "tests" in obj else None
    verifier = _text(obj["verifier"], "verifier") if "verifier" in obj else None
    if answer is None and tests is None and verifier != "env":
        raise RecordError(
            "missing field 'answer' (or 'tests' for code problems, or 'verifier': 'env' for episodes "
            "an environment grades)"
        )
    verifier = verifier or ("code" if answer is None else "math")
    if verifier not in known_verifiers:
        raise RecordError(
            f"field 'verifier': unknown verifier {verifier!r}; known: {', '.join(sorted(known_verifiers))}"
        )
    if verifier == "code" and tests is None:
        raise RecordError("missing field 'tests' (verifier 'code')")
    if verifier == "math" and answer is None:
        raise RecordError("missing field 'answer' (verifier 'math')")
    source = _text(obj["source"], "source") if "source" in obj else default_source
    metadata = obj.get("metadata", {})
    if not isinstance(metadata, dict):
        raise RecordError(f"field 'metadata': expected a mapping, got {type(metadata).__name__}")
    rid = _text(obj["id"], "id", numbers=True) if "id" in obj else where
    return Problem(
        id=rid,
        prompt=prompt,
        answer=answer,
        tests=tests,
        source=source,
        verifier=verifier,
        metadata={**metadata, "where": where},
        solution=solution,
    )


def read_records(paths: list[str | Path]) -> Iterator[tuple[str, Problem | None, str | None]]:
    """(where, problem, None) for every valid record of every file, in file order, and
    (where, None, reason) for every record training cannot use (the one reader of data files:
    training and `rlvr data audit` both go through it)."""
    known = set(VERIFIERS)
    seen: dict[str, str] = {}  # id -> where it was first seen
    for entry in paths:
        for path in data_files(Path(entry)):
            source = path.stem if not path.is_dir() else path.name
            for where, obj, err in read_rows(path):
                try:
                    if err is not None:
                        raise RecordError(err)
                    problem = parse_record(obj, where, source, known)
                    if problem.id in seen:
                        raise RecordError(f"duplicate id {problem.id!r} (first at {seen[problem.id]})")
                    seen[problem.id] = where
                except RecordError as exc:
                    yield where, None, str(exc)
                    continue
                yield where, problem, None


def load_problems(
    paths: list[str | Path], on_bad_record: str = "error", on_event: EventFn | None = None
) -> list[Problem]:
    """Every valid record of every file, in file order. 'error': the first bad record raises a
    DataError naming FILE:LINE; 'skip': each bad record is logged (and passed to on_event)."""
    problems: list[Problem] = []
    skipped = 0
    for where, problem, reason in read_records(paths):
        if problem is not None:
            problems.append(problem)
            continue
        if on_bad_record == "error":
            raise DataError(f"{where}: {reason} (data.on_bad_record=skip leaves such records out)")
        skipped += 1
        log.warning("skipped %s: %s", where, reason)
        if on_event:
            on_event("skipped_record", where=where, reason=reason)
    if skipped:
        log.warning(
            "skipped %d bad record(s) of %d; each is listed above and in events.jsonl", skipped, skipped + len(problems)
        )
    if not problems:
        raise DataError(
            f"no usable records in {', '.join(map(str, paths))}" + (f" ({skipped} skipped)" if skipped else "")
        )
    return problems


def as_chat(problems: list[Problem], system_prompt: str | None) -> list[Problem]:
    """Text prompts become one user message; a system prompt goes first where none is given."""
    import dataclasses

    out = []
    for p in problems:
        messages = [{"role": "user", "content": p.prompt}] if isinstance(p.prompt, str) else list(p.prompt)
        if system_prompt and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": system_prompt}, *messages]
        out.append(dataclasses.replace(p, prompt=messages))
    return out
