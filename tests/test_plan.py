"""`rlvr plan`: shapes and parameter counts against real models, the memory terms against published
figures, and the GPU split (bench/bench_plan.py checks the totals against measured peak memory)."""

from __future__ import annotations

import json

import pytest

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.cli.plan import run_plan
from rlvr.plan import GB, PUBLISHED, Cluster, shape_for_params, shape_of
from test_models import save_tiny


def test_the_shape_counts_the_parameters_a_model_has(tmp_path):
    model, _ = save_tiny(tmp_path / "m")  # Llama, tied embeddings
    assert shape_of(tmp_path / "m").params == sum(p.numel() for p in model.parameters())


def test_published_figures_of_a_7b_model():
    shape = shape_for_params(7e9)
    assert shape is PUBLISHED["qwen2.5-7b"]
    assert shape.params == pytest.approx(7.62e9, rel=0.01)  # Qwen2.5-7B's model card: 7.61B (biases aside)
    # KV cache per token in bf16: 28 layers x 4 KV heads x 128 dims x (K, V) x 2 bytes = 57,344 bytes
    cfg = load_config(
        None, ["model.dtype=bfloat16", "rollout.batch_size=1", "rollout.group_size=2", "rollout.max_new_tokens=1000"]
    )
    p = run_plan(cfg, shape, Cluster(), prompt_len=24)
    assert p["pools"]["rollout"]["terms_gb"]["kv_cache"] * GB == pytest.approx(57_344 * 2 * 1024)
    # fp32 weights + gradients + AdamW's two moments: 16 bytes per parameter (ZeRO, Rajbhandari et al. 2020, 3.1)
    states = sum(p["pools"]["trainer"]["terms_gb"][k] for k in ("weights", "gradients", "optimizer")) * GB
    assert states == pytest.approx(16 * shape.params)


def test_the_gpu_split_and_what_does_not_fit(tmp_path, capsys):
    base = [
        "--params",
        "7e9",
        "model.dtype=bfloat16",
        "train.strategy=fsdp",
        "model.gradient_checkpointing=true",
        "train.micro_batch_size=1",
        "--prompt-len",
        "512",
        "--decode-tps",
        "2000",
        "--train-tflops",
        "300",
    ]
    out = tmp_path / "plan.json"
    assert main(["plan", *base, "--cluster", "nodes=2,gpus=8,gpu_gb=80", "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    split, times = written["split"], written["times"]
    assert split["fits"] and split["rollout_gpus"] + split["trainer_gpus"] + split["inference_gpus"] == 16
    assert split["trainer_rank_gb"] <= 80 and split["rollout_gpu_gb"] <= 80
    assert "split of 16 GPUs" in capsys.readouterr().out
    # dynamic sampling (the default): up to 1 + algo.max_extra_rounds rounds of sampling a step
    assert written["settings"]["sampling_rounds_max"] == 4 and times["rollout_worst_s"] == pytest.approx(
        4 * times["rollout_s"]
    )
    assert main(["plan", *base, "--cluster", "nodes=1,gpus=2,gpu_gb=24", "--json", str(out)]) == 0
    split = json.loads(out.read_text())["split"]
    assert not split["fits"] and "GiB" in split["why"]
    assert "does not fit" in capsys.readouterr().err
    assert main(["plan", "--cluster", "nodes=2,gpu=8"]) == 2  # a misspelt key: a config error


def test_the_plan_counts_the_updates_logit_chunks_as_scoring_sizes_them():
    from rlvr import plan, scoring

    assert plan.CHUNK_FLOATS == scoring.CHUNK_FLOATS
