"""The run directory: resolved config, metrics, events, samples, summary.

    runs/<name>/config.yaml  metrics.jsonl  events.jsonl  samples.jsonl  eval.jsonl
                summary.json checkpoints/   model/        tensorboard/   report.html

eval.jsonl holds every held-out evaluation's outcome per problem (step, id, source, correct, and the
episode's return where its environment reports one), so two evaluations of a run can be compared
pair by pair.

Every file is append-only JSONL (one object per line) so a killed run
leaves readable files; each line is flushed as it is written. Metrics also
fan out to the configured sinks (TensorBoard, W&B, MLflow, Prometheus:
`rlvr.ops.sinks`). `rewind(step)` drops the metric and sample rows after
`step` (and evaluation rows), for a resume or a rollback to a checkpoint of that step, so
metrics.jsonl always describes the weights that survive; events.jsonl
keeps everything that happened, rollbacks and resumes included.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml


class MetricSink(Protocol):
    def metrics(self, step: int, values: dict[str, float]) -> None: ...
    def event(self, record: dict[str, Any]) -> None: ...
    def rewind(self, step: int) -> None: ...
    def close(self) -> None: ...


def _clean(value: Any) -> Any:
    # JSON has no NaN/inf: write them as strings so a diverged step is still recorded.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class RunLog:
    def __init__(
        self, run_dir: Path, config: dict[str, Any], *, sinks: Sequence[MetricSink] = (), resume_step: int | None = None
    ):
        """`resume_step`: continue an existing run from a checkpoint of that step (rows after it are dropped)."""
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.sinks = list(sinks)
        self._files: dict[str, Any] = {}
        if resume_step is None:
            self._open("w")
        else:
            self._open("a")
            self.rewind(resume_step)

    def _open(self, mode: str) -> None:
        self._files = {
            name: open(self.dir / f"{name}.jsonl", mode) for name in ("metrics", "events", "samples", "eval")
        }

    def _write(self, name: str, obj: dict[str, Any]) -> None:
        f = self._files[name]
        f.write(json.dumps(_clean(obj)) + "\n")
        f.flush()

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self._write("metrics", {"step": step, **values})
        for sink in self.sinks:
            sink.metrics(step, values)

    def event(self, kind: str, step: int | None = None, **data: Any) -> dict[str, Any]:
        record = {"time": time.time(), "kind": kind, "step": step, **data}
        self._write("events", record)
        for sink in self.sinks:
            sink.event(record)
        return record

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self._write("samples", {"step": step, **row})

    def evaluation(self, step: int, rows: list[dict[str, Any]]) -> None:
        """One held-out evaluation's per-problem outcomes, to eval.jsonl."""
        for row in rows:
            self._write("eval", {"step": step, **row})

    def rewind(self, step: int) -> None:
        """Drop metric, sample and evaluation rows of steps after `step` (a partial last line too)."""
        for name in ("metrics", "samples", "eval"):
            self._files[name].close()
            path = self.dir / f"{name}.jsonl"
            kept = [line for line in _complete_lines(path) if json.loads(line).get("step", 0) <= step]
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            os.replace(tmp, path)
            self._files[name] = open(path, "a")
        for sink in self.sinks:
            sink.rewind(step)

    def summary(self, values: dict[str, Any]) -> None:
        tmp = self.dir / "summary.json.tmp"
        tmp.write_text(json.dumps(_clean(values), indent=2) + "\n")
        os.replace(tmp, self.dir / "summary.json")

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        for sink in self.sinks:
            sink.close()


def _complete_lines(path: Path) -> list[str]:
    """Lines of a JSONL file that parse; a SIGKILL can leave the last one half written."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            json.loads(line)
        except ValueError:
            continue
        out.append(line)
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _complete_lines(Path(path)) if line.strip()]
