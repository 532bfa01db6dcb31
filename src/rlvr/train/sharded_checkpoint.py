"""Checkpoints of a sharded (FSDP2) trainer: every rank writes its own shards, nothing is gathered.

    checkpoints/step_000050/
      dcp/                 torch.distributed.checkpoint: model weights and AdamW state, one file per
                           rank plus .metadata (loadable on another world size: DCP reshards)
      model/               config, generation config, tokenizer (no weights: the export has them)
      trainer_state.pt     what `TrainerState.state_dict` holds but the optimizer and the RNG
      rank_N.pt            rank N's RNG (python, numpy, torch): each rank samples its own share
      manifest.json        step, config hash, score, sha256 of every file above

Same guarantees as `rlvr.checkpoint`: written into `step_NNNNNN.tmp/`, fsynced, manifest last,
renamed into place by rank 0 once every rank is done; a kill at any moment leaves either the
whole checkpoint or one that fails verification and is skipped. Ranks on nodes without a shared
filesystem need run.dir at a URL (rlvr.storage): each uploads its files there, fetches the others'
(every disk holds the whole checkpoint: a rollback reads it locally) and rank 0 commits it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from rlvr.checkpoint import (
    MANIFEST,
    Checkpoint,
    Checkpointer,
    _fsync_dir,
    _fsync_tree,
    _sha256,
    _state_bytes,
    check_loaded_keys,
    read_weights,
    retain,
    rng_state,
)
from rlvr.configlib import ConfigError
from rlvr.storage import RunStore

_LOCAL = ("optimizer", "rng")
"""State that lives per rank or in the shards, not in trainer_state.pt."""


class ShardedCheckpointer(Checkpointer):
    """`Checkpointer` for a sharded trainer group: every rank calls `save` and writes its shards.
    store: run.dir at a URL (rlvr.storage), where the ranks upload what they wrote and rank 0 commits."""

    def __init__(self, root: Path, *, par, store: RunStore | None = None, **kwargs) -> None:
        super().__init__(root, **kwargs)
        self.par, self.store = par, store

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
        self.last, shared = save_sharded(
            self.root,
            step,
            model,
            optimizer,
            tokenizer,
            trainer_state,
            self.par,
            self.manifest_extra(metrics),
            self.store,
        )
        if self.par.main or not shared:  # each disk's copies
            retain(self.root, self.keep, self.keep_best, self.best_mode)
        self.par.barrier()


def is_sharded(path: Path) -> bool:
    return (Path(path) / "dcp").is_dir()


def save_sharded(
    root: Path,
    step: int,
    model,
    optimizer,
    tokenizer,
    trainer_state: dict[str, Any],
    par,
    extra: dict[str, Any],
    store: RunStore | None = None,
) -> tuple[Checkpoint, bool]:
    """Every rank calls this (collective). Returns the checkpoint and whether the ranks share the
    run directory's disk. Ranks on disks of their own (nodes without a shared filesystem) each
    upload the files they wrote to `store` and download the others', so every disk ends with the
    whole checkpoint; rank 0 commits it at the URL once all is there."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    root = Path(root)
    final, tmp = root / f"step_{step:06d}", root / f"step_{step:06d}.tmp"
    if par.main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    par.barrier()
    tmp.mkdir(parents=True, exist_ok=True)  # a rank on a disk of its own
    weights, optim = get_state_dict(model, optimizer)
    dcp.save({"model": weights, "optim": optim}, checkpoint_id=str(tmp / "dcp"))
    torch.save(rng_state(), tmp / f"rank_{par.rank}.pt")
    if par.main:
        (tmp / "trainer_state.pt").write_bytes(
            _state_bytes({k: v for k, v in trainer_state.items() if k not in _LOCAL})
        )
        model.config.save_pretrained(tmp / "model")
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
    par.barrier()  # every rank's files are written
    seen = par.broadcast(_names(tmp) if par.main else None)
    mine = {name: _sha256(tmp / name) for name in _names(tmp) if par.main or name not in seen}
    parts = par.gather([mine])
    shared = not any(parts[1:])  # every file is where rank 0 sees it
    if not shared and store is None:
        raise RuntimeError(
            f"{root}: the trainer ranks do not share this directory (rank 0 does not see the files "
            "other ranks wrote: nodes without a shared filesystem); set run.dir to a URL "
            "(s3://bucket/run, ...) so that checkpoints are committed there"
        )
    files = {name: digest for part in parts for name, digest in part.items()}
    if store is not None:
        store.upload(tmp, sorted(mine))
        if not par.main:  # rank 0's go up with its commit
            store.push_logs()
    par.barrier()  # every file is at the URL
    if par.main or not shared:
        if not shared:  # (a store: checked above)
            store.download(final.name, sorted(set(files) - set(mine)), tmp)
        (tmp / MANIFEST).write_text(
            json.dumps({"step": step, **extra, "world_size": par.world, "files": dict(sorted(files.items()))}, indent=1)
        )
        _fsync_tree(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
    if par.main and store is not None:
        store.commit(final)
    par.barrier()  # nobody moves on (or resumes) before the checkpoint is in place
    return Checkpoint(final, step), shared


def _names(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in sorted(root.rglob("*")) if p.is_file()]


def load_sharded(path: Path, model, optimizer, par) -> dict[str, Any]:
    """Weights and optimizer state from a sharded checkpoint into the sharded model and optimizer
    (collective); returns this rank's RNG state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    saved = json.loads((path / MANIFEST).read_text()).get("world_size")
    if saved != par.world:
        raise ConfigError(
            f"ckpt.resume: {path} was written by {saved} rank(s), this run has {par.world}; "
            f"resume with train.world_size={saved}"
        )
    weights, optim = get_state_dict(model, optimizer)
    state = {"model": weights, "optim": optim}
    dcp.load(state, checkpoint_id=str(path / "dcp"))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return torch.load(path / f"rank_{par.rank}.pt", weights_only=False)


def load_full_weights(model, model_dir: Path) -> None:
    """A Hugging Face model directory's (full) weights into a sharded model: each rank keeps its
    own shards of them."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    weights = read_weights(Path(model_dir))
    result = set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, strict=False))
    check_loaded_keys(model, weights, result.missing_keys, result.unexpected_keys, model_dir)
