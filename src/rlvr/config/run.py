"""Sections run, eval, ckpt, log and debug: where a run writes, what it evaluates and keeps, what it logs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlvr.config.rollout import EngineName
from rlvr.configlib import require


@dataclass
class RunConfig:
    dir: str | None = None
    """Run directory; default runs/<name>. A URL (s3://bucket/run, gs://, file://: fsspec) keeps the run
    there, the local disk only its cache (rlvr.storage)."""
    name: str = "default"
    progress: bool = True
    """Live progress bar and summary table on the console."""


@dataclass
class EvalConfig:
    n: int = 500
    """Held-out problems scored greedily before and after training; with data files, the
    data.eval_size records held out (setting eval.n above it is a config error)."""
    every: int = 25
    """Evaluate every N steps (0 = only before and after)."""
    n_during: int = 200
    batch_size: int = 500
    """Problems per engine call."""
    engine: EngineName | None = None
    """The engine evaluation decodes with; None: rollout.engine."""

    def __post_init__(self) -> None:
        for key in ("n", "n_during", "batch_size"):
            require(
                getattr(self, key) >= 1,
                key,
                f"must be >= 1 (a run is evaluated before and after), got {getattr(self, key)}",
            )


@dataclass
class CkptConfig:
    every: int = 50
    """Save every N steps and at the end (0 = never)."""
    keep: int = 2
    """Keep the newest N checkpoints (0 = keep all), plus the best one when ckpt.keep_best is set."""
    resume: str | None = None
    """'auto' resumes from the newest checkpoint whose manifest verifies (corrupt ones are
    reported and skipped), or give a checkpoint directory (a local path or a URL)."""
    keep_best: str | None = None
    """Also keep the checkpoint with the best value of this metric (e.g. 'eval/accuracy'),
    among checkpoints saved on a step that measured it."""
    best_mode: Literal["max", "min"] = "max"
    """Whether a larger or a smaller ckpt.keep_best value is better."""
    async_write: bool = False
    """Write checkpoints on a background thread (the state is copied to memory first), so
    the training loop does not wait on the disk."""

    def __post_init__(self) -> None:
        require(self.every >= 0, "every", f"must be >= 0, got {self.every}")
        require(self.keep >= 0, "keep", f"must be >= 0, got {self.keep}")


@dataclass
class LogConfig:
    samples_per_step: int = 4
    tensorboard: bool = True
    """TensorBoard event files under <run dir>/tensorboard."""
    wandb_project: str | None = None
    """Log to this Weights & Biases project (needs `pip install wandb` and a login)."""
    mlflow_tracking_uri: str | None = None
    """Log to this MLflow tracking URI, e.g. 'file:./mlruns' (needs `pip install mlflow`)."""
    mlflow_experiment: str = "rlvr"
    prometheus_port: int | None = None
    """Serve /metrics (Prometheus) and /healthz on this port for the length of the run (0 = any free port)."""
    prometheus_host: str = "127.0.0.1"
    healthz_stale_s: float = 900.0
    """/healthz answers 503 when no step has finished for this many seconds."""
    report: bool = True
    """Write report.html (and plots) into the run directory when training ends."""


@dataclass
class DebugConfig:
    inject_nan_at_step: int = 0
    """Fault injection: make the loss NaN at this step (once), to see rollback work (0 = off)."""
    kill_during_upload_at_step: int = 0
    """Fault injection: with run.dir a URL, kill -9 this process while the checkpoint of this step is
    being uploaded (after its first file), to see a resume skip the uncommitted upload (0 = off)."""
