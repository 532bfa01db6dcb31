"""Reading back what the real W&B (offline mode) and MLflow (local file store) libraries wrote."""

from __future__ import annotations

import json
import struct
from pathlib import Path


def offline_tracking(monkeypatch) -> None:
    """W&B writes its run file locally instead of uploading; MLflow 3 accepts its file store."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


def wandb_records(path: Path):
    """The protobuf records of an offline W&B run file: a 7-byte header (`:W&B`, magic, version),
    then 32 KiB blocks of LevelDB-log chunks (crc32, length, type 1 full / 2 first / 3 middle / 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", path
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a chunk header is padding
            pos += 32768 - pos % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            yield record


def wandb_history(run_dir: Path) -> list[dict]:
    """Every history row W&B recorded for the run under run_dir (its own `_` keys left out)."""
    (path,) = Path(run_dir).glob("wandb/offline-run-*/run-*.wandb")
    return [
        {
            (i.key or "/".join(i.nested_key)): json.loads(i.value_json)
            for i in r.history.item
            if not (i.key or "/".join(i.nested_key)).startswith("_")
        }
        for r in wandb_records(path)
        if r.WhichOneof("record_type") == "history"
    ]
