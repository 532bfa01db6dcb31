"""Checkpoints that either verify completely or do not count.

A checkpoint is written into `step_NNNNNN.tmp/`, every file fsynced, a
manifest with the sha256 of every file written last, and the directory
renamed into place (then the parent directory fsynced), so a crash
mid-write never leaves a checkpoint that looks valid. `latest_valid` walks
checkpoints newest first and skips (and reports) any whose manifest is
missing or does not verify.

    checkpoints/step_000050/
      model/               safetensors weights, config, tokenizer (loadable by `load_model`)
      trainer_state.pt     optimizer, scheduler, RNG (python, numpy, torch), sampler position,
                           reward monitor, alert windows, rollback bookkeeping, history
      manifest.json        step, config hash, score, sha256 of every file above

`Checkpointer` adds retention (the newest N plus the best by a metric) and
optional background writing: the state is copied to memory on the
training thread and written on another, one checkpoint in flight at a time.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import random
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.configlib import ConfigError
from rlvr.urls import fetch_dir, is_url

MANIFEST = "manifest.json"
# Keys that may change between a run and its resumption without changing what is trained.
_VOLATILE = {("ckpt", "resume"), ("run", "progress"), ("debug",), ("log",), ("alerts",), ("sources",), ("secrets",)}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for p in sorted(path.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
        elif p.is_dir():
            _fsync_dir(p)
    _fsync_dir(path)


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def config_fingerprint(config: dict[str, Any]) -> str:
    """Hash of the settings that shape training (not resume/progress/logging/alert/debug keys)."""
    trimmed = copy.deepcopy(config)
    for path in _VOLATILE:
        node = trimmed
        for part in path[:-1]:
            node = node.get(part, {})
        node.pop(path[-1], None)
    return hashlib.sha256(json.dumps(trimmed, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_changes(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """'key: old -> new' for every setting that differs (volatile keys included; caller filters)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b, name = old.get(key), new.get(key), f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_changes(a, b, name + ".")
        elif a != b:
            out.append(f"{name}: {a!r} -> {b!r}")
    return out


def state_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over names, dtypes, shapes and bytes: equal digests mean bit-identical weights."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


@dataclass
class Checkpoint:
    path: Path
    step: int

    @property
    def model_dir(self) -> Path:
        return self.path / "model"

    def trainer_state(self) -> dict[str, Any]:
        return torch.load(self.path / "trainer_state.pt", weights_only=False)

    def manifest(self) -> dict[str, Any]:
        return json.loads((self.path / MANIFEST).read_text())


def read_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """The safetensors weights of a Hugging Face model directory (one file or an indexed set)."""
    from safetensors.torch import load_file

    index = model_dir / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    )
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(model_dir / name))
    return state


def load_weights(model: torch.nn.Module, model_dir: Path) -> None:
    """Load safetensors weights from `model_dir` into `model` in place (optimizer references stay valid)."""
    # rlvr.models imports transformers: this module's import 1.1 s -> 4.4 s at the top
    from rlvr.models.lora import is_peft, load_adapter_state

    model_dir = Path(model_dir)
    if is_peft(model):  # a LoRA run: checkpoints hold only the adapter (the base never changes)
        return load_adapter_state(model, model_dir)
    state = read_weights(model_dir)
    result = model.load_state_dict(state, strict=False)
    check_loaded_keys(model, state, result.missing_keys, result.unexpected_keys, model_dir)


def check_loaded_keys(model: torch.nn.Module, loaded, missing, unexpected, source) -> None:
    """Every load checks its keys: a tied weight (lm_head sharing the embedding) is saved once, so it
    may be missing when its twin was loaded; anything else missing, or any key the model does not
    have, is an error naming `source`. (Parameters are compared by identity, which holds for the
    DTensor parameters of a sharded model too.)"""
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded_ids = {id(params[k]) for k in loaded if k in params}
    missing = [k for k in missing if k not in params or id(params[k]) not in loaded_ids]
    if missing or unexpected:
        raise RuntimeError(
            f"{source}: weights do not fit the model (missing {list(missing)[:5]}, "
            f"unexpected {list(unexpected)[:5]}); was it saved from another model?"
        )


def _write(
    root: Path, step: int, write_model: Callable[[Path], None], state_bytes: bytes, manifest_extra: dict[str, Any]
) -> Checkpoint:
    final, tmp = root / f"step_{step:06d}", root / f"step_{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_model(tmp / "model")
    (tmp / "trainer_state.pt").write_bytes(state_bytes)
    files = {str(p.relative_to(tmp)): _sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    (tmp / MANIFEST).write_text(json.dumps({"step": step, **manifest_extra, "files": files}, indent=1))
    _fsync_tree(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    return Checkpoint(final, step)


def _state_bytes(trainer_state: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    torch.save(trainer_state, buf)  # serialising is also the copy the background writer needs
    return buf.getvalue()


class Checkpointer:
    """Saves checkpoints of one run: atomic, verified, retained, optionally in the background."""

    def __init__(
        self,
        root: Path,
        *,
        config_hash: str,
        keep: int,
        keep_best: str | None = None,
        best_mode: str = "max",
        async_write: bool = False,
        on_saved: Callable[[Path], None] | None = None,
    ):
        """on_saved(path): after each checkpoint is written and retention has run (rlvr.storage's upload)."""
        self.root = Path(root)
        self.on_saved = on_saved
        self.config_hash, self.keep, self.keep_best, self.best_mode = config_hash, keep, keep_best, best_mode
        self.async_write = async_write
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.last: Checkpoint | None = None

    def manifest_extra(self, metrics: dict[str, float] | None) -> dict[str, Any]:
        """The manifest's config hash and keep_best score (taken from the step's `metrics`)."""
        score = (metrics or {}).get(self.keep_best) if self.keep_best else None
        return {"config_hash": self.config_hash, "score": {self.keep_best: score} if self.keep_best else {}}

    def save(
        self,
        step: int,
        model,
        tokenizer,
        trainer_state: dict[str, Any],
        *,
        metrics: dict[str, float] | None = None,
        optimizer=None,
    ) -> None:
        """`metrics`: the values measured at this step; the keep_best score is taken from them.
        optimizer: unused here (its state is in trainer_state); a sharded checkpointer's shards hold it."""
        extra = self.manifest_extra(metrics)
        state_bytes = _state_bytes(trainer_state)
        if not self.async_write:
            self.last = _write(self.root, step, lambda p: _save_model(model, tokenizer, p, None), state_bytes, extra)
            self._saved()
            return
        self.wait()  # one write in flight: a slow disk slows the loop down rather than piling up copies
        weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

        def work() -> None:
            try:
                self.last = _write(
                    self.root, step, lambda p: _save_model(model, tokenizer, p, weights), state_bytes, extra
                )
                self._saved()
            except BaseException as exc:  # re-raised on the training thread by wait()
                self._error = exc

        self._thread = threading.Thread(target=work, name=f"checkpoint-{step}", daemon=True)
        self._thread.start()

    def _saved(self) -> None:
        retain(self.root, self.keep, self.keep_best, self.best_mode)
        if self.on_saved is not None:
            self.on_saved(self.last.path)

    def wait(self) -> None:
        """Block until the write in flight is on disk; raise its error, if any."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"checkpoint write failed: {error}") from error


def _save_model(model, tokenizer, path: Path, weights: dict[str, torch.Tensor] | None) -> None:
    if weights is None:
        model.save_pretrained(path, safe_serialization=True)
    else:
        model.save_pretrained(path, safe_serialization=True, state_dict=weights)
    tokenizer.save_pretrained(path)


def verify(path: Path) -> str | None:
    """None when the checkpoint at `path` is complete and intact, else what is wrong."""
    manifest = Path(path) / MANIFEST
    if not manifest.exists():
        return "no manifest (incomplete write)"
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError) as exc:
        return f"unreadable manifest: {exc}"
    for name, digest in files.items():
        p = Path(path) / name
        if not p.exists():
            return f"missing file {name}"
        if _sha256(p) != digest:
            return f"checksum mismatch in {name} (truncated or corrupted)"
    return None


def list_checkpoints(root: Path) -> list[Path]:
    root = Path(root)
    if not root.exists():
        return []
    return sorted(
        p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_") and not p.name.endswith(".tmp")
    )


def latest_valid(
    root: Path, on_skip: Callable[[Path, str], None] | None = None, before: int | None = None
) -> Checkpoint | None:
    """The newest checkpoint (with step < `before`, if given) whose manifest verifies."""
    for path in reversed(list_checkpoints(root)):
        step = int(path.name.split("_")[1])
        if before is not None and step >= before:
            continue
        problem = verify(path)
        if problem is None:
            return Checkpoint(path, step)
        if on_skip:
            on_skip(path, problem)
    return None


def open_checkpoint(path: Path) -> Checkpoint:
    """A checkpoint named by the user (ckpt.resume=<dir>), verified."""
    path = Path(path)
    problem = verify(path) if path.is_dir() else "no such directory"
    if problem:
        raise ConfigError(f"ckpt.resume: {path}: {problem}; give a checkpoint directory or 'auto'")
    return Checkpoint(path, json.loads((path / MANIFEST).read_text())["step"])


def manifest_score(text: str, metric: str) -> float | None:
    """The keep_best score a manifest's text records for `metric` (None: none, or unreadable)."""
    try:
        value = json.loads(text).get("score", {}).get(metric)
    except ValueError:
        return None
    return value if isinstance(value, (int, float)) else None


def retained(
    names: list[str],
    manifest_text: Callable[[str], str],
    keep: int,
    keep_best: str | None = None,
    best_mode: str = "max",
) -> set[str]:
    """Of checkpoint names (oldest first), those retention keeps: the newest `keep` and the best by
    `keep_best` (read from each manifest's text); all of them when keep <= 0."""
    if keep <= 0:
        return set(names)
    kept = set(names[-keep:])
    if keep_best:
        scored = [(s, n) for n in names if (s := manifest_score(manifest_text(n), keep_best)) is not None]
        if scored:
            pick = max if best_mode == "max" else min
            kept.add(pick(scored, key=lambda sn: (sn[0], sn[1]))[1])
    return kept


def retain(root: Path, keep: int, keep_best: str | None = None, best_mode: str = "max") -> None:
    """Delete all but the newest `keep` checkpoints and the best one by `keep_best`."""
    paths = {p.name: p for p in list_checkpoints(root)}

    def text(name: str) -> str:
        try:
            return (paths[name] / MANIFEST).read_text()
        except OSError:
            return ""

    kept = retained(list(paths), text, keep, keep_best, best_mode)
    for name, path in paths.items():
        if name not in kept:
            shutil.rmtree(path, ignore_errors=True)


def resume_point(setting: str | None, root: Path) -> tuple[Checkpoint | None, list[str]]:
    """The checkpoint `ckpt.resume` names (None: start fresh) and the unusable ones skipped on the way;
    a checkpoint directory at a URL is downloaded first (rlvr.urls.fetch_dir)."""
    skipped: list[str] = []
    if not setting:
        return None, skipped
    if setting == "auto":
        return latest_valid(root, on_skip=lambda p, why: skipped.append(f"{p}: {why}")), skipped
    if is_url(setting):
        try:
            return open_checkpoint(fetch_dir(setting)), skipped
        except FileNotFoundError as exc:
            raise ConfigError(f"ckpt.resume: {exc}; give a checkpoint directory or 'auto'") from None
    return open_checkpoint(Path(setting)), skipped


def config_drift(ckpt: Checkpoint, config: dict[str, Any]) -> list[str]:
    """Training settings that differ from the ones the checkpoint was written with ('key: old -> new')."""
    if ckpt.manifest().get("config_hash") == config_fingerprint(config):
        return []
    old = ckpt.trainer_state().get("config", {})
    volatile = tuple(".".join(p) for p in _VOLATILE)
    return [c for c in config_changes(old, config) if not c.startswith(volatile)]
