"""What a weight sync costs, per method, side by side in one run: bytes, seconds, GB/s, and the share
the checksum check (rlvr.rollout.sync) adds.

    .venv/bin/python bench/bench_weight_sync.py [--models tiny smollm2] [--repeats 3] [--json FILE]

For each model (the default run's cold start; SmolLM2-135M-Instruct with `make smollm2`) and each
method: 'copy' (an in-process engine with weights of its own, as under FSDP), 'vllm_reload' (vLLM's
in-place reload) and 'object_store' (Ray: the trainer publishes, a worker actor fetches and loads,
both checks). Each sync moves the weights after a perturbation (every value changes), `--repeats`
times after a warm-up; the figures are medians. 'check_s' is the time of the checks alone (the
trainer's checksum of what it sends and the engine's of what it holds), also a median.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from rlvr.rollout.sync import SyncMeter, tied_names  # noqa: E402
from rlvr.train.sync import sync_weights  # noqa: E402


def perturb(model) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)


def check_seconds(engine, model) -> float:
    """The checks alone: the trainer's checksum of the weights it sends and the engine's of what it holds."""
    t0 = time.perf_counter()
    meter = SyncMeter(engine.sync_dtype, tied_names(model))
    for _ in meter.count(model.state_dict().items()):
        pass
    assert engine.weights_checksum() == meter.checksum
    return time.perf_counter() - t0


def bench_local(label: str, engine, model, repeats: int) -> dict:
    rows = []
    for version in range(1, repeats + 2):  # the first is a warm-up
        perturb(model)
        synced = sync_weights(engine, model, version, version)
        assert synced.mismatch == 0, label
        rows.append((synced.seconds, check_seconds(engine, model)))
    seconds = statistics.median(r[0] for r in rows[1:])
    return {
        "method": synced.method,
        "engine": label,
        "bytes": synced.bytes,
        "seconds": round(seconds, 4),
        "gb_s": round(synced.bytes / seconds / 1e9, 3),
        "check_s": round(statistics.median(r[1] for r in rows[1:]), 4),
    }


def bench_ray(model, model_dir: str, repeats: int) -> dict:
    import ray

    from rlvr.deploy.ray.sync import WeightPublisher, load_published

    @ray.remote
    class Worker:
        def __init__(self, path: str) -> None:
            from rlvr.models import load_model
            from rlvr.rollout import HFEngine

            torch.set_num_threads(1)
            self.engine = HFEngine(load_model(path)[0], None)

        def load(self, handle):
            return load_published(self.engine, handle)

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        worker, publisher = Worker.remote(model_dir), WeightPublisher()
        rows = []
        for version in range(1, repeats + 2):
            perturb(model)
            t0 = time.perf_counter()
            handle = publisher.publish(model.state_dict().items(), version, tied_names(model))
            published = time.perf_counter() - t0
            loaded = ray.get(worker.load.remote(handle))
            assert loaded.checksum_ok
            rows.append(published + loaded.load_s)
        seconds = statistics.median(rows[1:])
        return {
            "method": "object_store",
            "engine": "ray worker (hf)",
            "bytes": handle.bytes,
            "seconds": round(seconds, 4),
            "gb_s": round(handle.bytes / seconds / 1e9, 3),
        }
    finally:
        ray.shutdown()


def bench_model(name: str, repeats: int) -> list[dict]:
    from rlvr.config import load_config
    from rlvr.console import RunConsole
    from rlvr.models import load_model
    from rlvr.rollout import HFEngine, build_engine
    from rlvr.assembly import starting_point

    cfg = load_config(ROOT / "configs" / "smollm2.yaml" if name == "smollm2" else None, [])
    path = starting_point(cfg, RunConsole(False))
    model, tok = load_model(path)
    rows = [bench_local("hf copy", HFEngine(copy.deepcopy(model), tok), model, repeats)]
    try:
        vllm = build_engine(cfg.rollout, model, tok, name="vllm", model_dir=path, seed=0, dtype="float32")
        rows.append(bench_local("vllm", vllm, model, repeats))
        del vllm
    except Exception as exc:  # noqa: BLE001 - a missing engine is a row, not a crash
        rows.append({"engine": "vllm", "error": f"{type(exc).__name__}: {exc}"})
    rows.append(bench_ray(model, str(path), repeats))
    return [{"model": name, "params": sum(p.numel() for p in model.parameters()), **r} for r in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["tiny"], choices=["tiny", "smollm2"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "weight_sync_results.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = [row for name in args.models for row in bench_model(name, args.repeats)]
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "command": " ".join(["python", *sys.argv]), "rows": rows}
    print(json.dumps(out, indent=1))
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
