"""Metric sinks besides metrics.jsonl: TensorBoard, Weights & Biases, MLflow, Prometheus.

Each sink takes `metrics(step, values)`, `event(record)`, `rewind(step)` and
`close()` (see `rlvr.runlog.MetricSink`). W&B and MLflow are imported only
when configured; a configured one that is not installed is reported and
skipped, never a crash mid-run. Prometheus serves `/metrics` and `/healthz`
from a daemon thread on `log.prometheus_host:log.prometheus_port`.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rlvr.config.run import LogConfig
from rlvr.configlib import ConfigError


def _finite(values: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in values.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


class TensorBoardSink:
    def __init__(self, log_dir: Path, resume_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self._dir = str(log_dir)
        # purge_step hides the events a killed run wrote after the checkpoint it resumes from
        self._writer = SummaryWriter(self._dir, purge_step=None if resume_step is None else resume_step + 1)

    def metrics(self, step: int, values: dict[str, float]) -> None:
        for key, value in _finite(values).items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def event(self, record: dict[str, Any]) -> None:
        if record["kind"] in ("alert", "rollback"):
            self._writer.add_text(f"events/{record['kind']}", json.dumps(record, default=str), record.get("step") or 0)

    def rewind(self, step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer.close()
        self._writer = SummaryWriter(self._dir, purge_step=step + 1)

    def close(self) -> None:
        self._writer.close()


STEP_KEY = "train/step"
"""The W&B metric every row is plotted against."""


class WandbSink:
    def __init__(self, project: str, run_dir: Path, config: dict[str, Any], resume: bool):
        import wandb

        self._wandb = wandb
        self._run = wandb.init(
            project=project,
            name=Path(run_dir).name,
            dir=str(run_dir),
            config=config,
            resume="allow" if resume else None,
        )
        # rows are plotted against the training step, logged as a metric: W&B's own step only grows, so
        # the rows after a rollback or a resume (a step seen before) are kept, not dropped
        self._run.define_metric(STEP_KEY)
        self._run.define_metric("*", step_metric=STEP_KEY)

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self._run.log({STEP_KEY: step, **_finite(values)})

    def event(self, record: dict[str, Any]) -> None:
        if record["kind"] in ("alert", "rollback") and hasattr(self._wandb, "alert"):
            self._wandb.alert(title=f"rlvr {record['kind']}", text=str(record.get("message", record)))

    def rewind(self, step: int) -> None:  # W&B keeps history; the next rows carry their own train/step
        pass

    def close(self) -> None:
        self._run.finish()


class MLflowSink:
    def __init__(self, tracking_uri: str, experiment: str, run_name: str, config: dict[str, Any]):
        import mlflow

        self._mlflow = mlflow
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_experiment(experiment)
        self._run = mlflow.start_run(run_name=run_name)
        params = [(k, str(v)[:250]) for k, v in _flatten(config).items()]
        for start in range(0, len(params), 100):  # every key, in the batches of 100 MLflow takes
            mlflow.log_params(dict(params[start : start + 100]))

    def metrics(self, step: int, values: dict[str, float]) -> None:
        # MLflow metric names allow / but not every character; keep them readable
        self._mlflow.log_metrics({re.sub(r"[^\w./ -]", "_", k): v for k, v in _finite(values).items()}, step=step)

    def event(self, record: dict[str, Any]) -> None:
        if record["kind"] in ("alert", "rollback"):
            self._mlflow.set_tag(f"last_{record['kind']}", str(record.get("message", record.get("reason", "")))[:250])

    def rewind(self, step: int) -> None:
        pass

    def close(self) -> None:
        self._mlflow.end_run()


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:  # an empty mapping (data.mix: {}) is a value of its own
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


class PrometheusSink:
    """/metrics: every finite metric as a gauge `rlvr_<key>`, plus step, alert and rollback counters.
    /healthz: 200 while steps keep finishing, 503 when none has for `stale_s`, the run failed or a
    Ray worker is dead; on Ray it lists every pool's replicas (state, pid, device, restarts)."""

    def __init__(self, host: str, port: int, stale_s: float):
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self._registry = CollectorRegistry()
        self._gauge_cls = Gauge
        self._gauges: dict[str, Any] = {}
        self._step = Gauge("rlvr_step", "last finished training step", registry=self._registry)
        self._events = Counter("rlvr_events", "events by kind", ["kind"], registry=self._registry)
        self._stale_s = stale_s
        self._started = self._last = time.time()
        self._last_step = 0
        self._status = "running"
        self._pools: dict[str, dict[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="prometheus", daemon=True).start()

    def metrics(self, step: int, values: dict[str, float]) -> None:
        with self._lock:
            for key, value in _finite(values).items():
                name = "rlvr_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)
                if name not in self._gauges:
                    self._gauges[name] = self._gauge_cls(name, key, registry=self._registry)
                self._gauges[name].set(value)
            self._step.set(step)
            self._last, self._last_step = time.time(), step

    def event(self, record: dict[str, Any]) -> None:
        self._events.labels(kind=record["kind"]).inc()
        if record["kind"] == "failed":
            self._status = "failed"
        with self._lock:
            self._pool_event(record)

    def _pool_event(self, e: dict[str, Any]) -> None:
        """The Ray pools' state, from the events the batch source logs: `placement` (up, where),
        `worker_failed` (restarting, or dead out of restarts), `worker_timeout` (restarted to free
        it), `worker_restarted` (up again, a new pid), `trainer_restarted`."""
        kind = e["kind"]
        if kind == "trainer_restarted":
            e = {**e, "module": "trainer", "replica": 0}
        elif kind not in ("placement", "worker_failed", "worker_timeout", "worker_restarted"):
            return
        replica = self._pools.setdefault(e["module"], {}).setdefault(
            str(e["replica"]), {"state": "up", "restarts": 0, "failures": 0, "timeouts": 0}
        )
        if kind == "placement":
            replica.update(state="up", pid=e.get("pid"), device=e.get("device"))
        elif kind == "worker_failed":
            replica["failures"] += 1
            replica["state"] = "restarting" if e.get("reissued") else "dead"
        elif kind == "worker_timeout":
            replica["timeouts"] += 1
            replica["state"] = "restarting"
        else:  # a new process answered (worker) or the trainer came back from its checkpoint
            replica["restarts"] += 1
            replica.update(state="up", **({"pid": e["new_pid"]} if "new_pid" in e else {}))

    def rewind(self, step: int) -> None:
        pass

    def health(self) -> tuple[int, dict[str, Any]]:
        age = time.time() - self._last
        with self._lock:
            pools = json.loads(json.dumps(self._pools))
        dead = sorted(f"{m}/{r}" for m, reps in pools.items() for r, rep in reps.items() if rep["state"] == "dead")
        ok = self._status != "failed" and age <= self._stale_s and not dead
        status = (
            "failed" if self._status == "failed" else "stale" if age > self._stale_s else "degraded" if dead else "ok"
        )
        out = {"status": status, "step": self._last_step, "seconds_since_step": round(age, 1)}
        if pools:  # a Ray run: every pool's replicas (rlvr.deploy.ray)
            out["pools"] = pools
        return (200 if ok else 503), out

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path == "/metrics":
                    code, body, ctype = 200, generate_latest(sink._registry), CONTENT_TYPE_LATEST
                elif self.path == "/healthz":
                    code, payload = sink.health()
                    body, ctype = json.dumps(payload).encode(), "application/json"
                else:
                    code, body, ctype = 404, b"not found: try /metrics or /healthz\n", "text/plain"
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # keep scrapes out of the training console
                pass

        return Handler

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _refused(key: str, exc: Exception) -> Exception:
    """The library's own refusal (no API key, a store it will not open) as a config error naming the key;
    anything else is a bug and keeps its traceback."""
    if type(exc).__module__.split(".")[0] not in ("wandb", "mlflow"):
        return exc
    return ConfigError(f"{key}: {type(exc).__name__}: {exc}")


def build_sinks(log: LogConfig, run_dir: Path, config: dict, *, resume_step: int | None, ui) -> list:
    """The sinks section `log` asks for; `config`: the run's, as plain data, for the trackers that keep
    it. A configured W&B/MLflow that is not installed is a config error."""
    sinks = []
    if log.tensorboard:
        sinks.append(TensorBoardSink(Path(run_dir) / "tensorboard", resume_step))
    if log.wandb_project:
        try:
            sinks.append(WandbSink(log.wandb_project, run_dir, config, resume=resume_step is not None))
        except ImportError:
            raise ConfigError(
                "log.wandb_project: wandb is not installed: pip install 'rlvr[tracking]' (or wandb), "
                "or unset log.wandb_project"
            ) from None
        except Exception as exc:
            raise _refused("log.wandb_project", exc) from None
    if log.mlflow_tracking_uri:
        try:
            sinks.append(MLflowSink(log.mlflow_tracking_uri, log.mlflow_experiment, Path(run_dir).name, config))
        except ImportError:
            raise ConfigError(
                "log.mlflow_tracking_uri: mlflow is not installed: pip install 'rlvr[tracking]' (or "
                "mlflow), or unset log.mlflow_tracking_uri"
            ) from None
        except Exception as exc:
            raise _refused("log.mlflow_tracking_uri", exc) from None
    if log.prometheus_port is not None:
        try:
            sink = PrometheusSink(log.prometheus_host, log.prometheus_port, log.healthz_stale_s)
        except OSError as exc:
            raise ConfigError(
                f"log.prometheus_port: cannot listen on {log.prometheus_host}:{log.prometheus_port} "
                f"({exc.strerror or exc}); choose a free port, or 0 for any"
            ) from None
        ui.print(f"Prometheus metrics on http://{log.prometheus_host}:{sink.port}/metrics (health: /healthz)")
        sinks.append(sink)
    return sinks
