"""The run directory: resolved config, metrics, events, samples, summary.

    runs/<name>/config.yaml  metrics.jsonl  events.jsonl  samples.jsonl
                summary.json checkpoints/   model/        tensorboard/

Every file is append-only JSONL (one object per line) so a killed run
leaves readable files; each line is flushed as it is written.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import yaml


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
    def __init__(self, run_dir: Path, config: dict[str, Any], *, tensorboard: bool = True, append: bool = False):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        mode = "a" if append else "w"
        self._files = {name: open(self.dir / f"{name}.jsonl", mode) for name in ("metrics", "events", "samples")}
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self._tb = SummaryWriter(str(self.dir / "tensorboard"))
            except ImportError:  # tensorboard is a dependency, but stay usable without it
                self._tb = None

    def _write(self, name: str, obj: dict[str, Any]) -> None:
        f = self._files[name]
        f.write(json.dumps(_clean(obj)) + "\n")
        f.flush()

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self._write("metrics", {"step": step, **values})
        if self._tb is not None:
            for key, value in values.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)

    def event(self, kind: str, step: int | None = None, **data: Any) -> dict[str, Any]:
        record = {"time": time.time(), "kind": kind, "step": step, **data}
        self._write("events", record)
        return record

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self._write("samples", {"step": step, **row})

    def summary(self, values: dict[str, Any]) -> None:
        (self.dir / "summary.json").write_text(json.dumps(_clean(values), indent=2) + "\n")

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        if self._tb is not None:
            self._tb.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not Path(path).exists():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
