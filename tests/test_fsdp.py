"""train.strategy=fsdp (FSDP2 over gloo on the CPU): a 2-rank update is the 1-process update, a
2-rank run killed with SIGKILL resumes bit-exactly from its sharded checkpoint, and its export is
a plain transformers model."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from ops_tiny import OPS_TINY, events, logged_step, metric_rows, sft_cache
from safetensors.torch import load_file

from rlvr.config import load_config
from rlvr.models import load_policy
from rlvr.models.tiny import save_tiny
from rlvr.records import Problem
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.scoring import completion_logprobs
from rlvr.assembly import run_sft

WORKER = Path(__file__).with_name("fsdp_worker.py")


def _batch(model_dir: Path, path: Path) -> None:
    """12 sampled completions (3 groups of 4), uneven lengths, advantages, one sample masked out."""
    model, tok = load_policy(load_config().model, model_dir)
    torch.manual_seed(0)
    problems = [Problem(id=f"p{i}", prompt=f"{i}+{i + 3}=", answer=str(2 * i + 3)) for i in range(3)]
    completions = HFEngine(model, tok).generate(problems, SamplingParams(group_size=4, max_new_tokens=12))
    advantages = torch.randn(len(completions))
    loss_mask = torch.ones(len(completions))
    loss_mask[5] = 0.0
    ref = completion_logprobs(model, completions, tok.pad_token_id, 1.0)  # (N, T)
    torch.save(
        {
            "completions": completions,
            "advantages": advantages,
            "loss_mask": loss_mask,
            "ref_logp": ref + 0.01 * torch.randn_like(ref),
        },
        path,
    )


def test_a_2_rank_fsdp_update_equals_the_single_process_update(tmp_path):
    model_dir = save_tiny(tmp_path / "tiny", hidden=32, layers=2, heads=2, seed=0)
    _batch(model_dir, tmp_path / "batch.pt")
    args = [str(model_dir), str(tmp_path / "batch.pt")]
    subprocess.run([sys.executable, str(WORKER), *args, str(tmp_path / "one.pt")], check=True, timeout=300)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(WORKER),
            *args,
            str(tmp_path / "two.pt"),
        ],
        check=True,
        timeout=300,
    )
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    assert (one["world"], two["world"]) == (1, 2)
    start = load_policy(load_config().model, model_dir)[0].state_dict()
    assert one["weights"].keys() == two["weights"].keys() == start.keys()
    diff = max(float((one["weights"][k] - two["weights"][k]).abs().max()) for k in start)
    moved = max(float((one["weights"][k] - start[k]).abs().max()) for k in start)
    assert diff <= 1e-5 and moved > 1e-3, (diff, moved)  # the same step, and a step that moved the weights
    # the loss and the gradient norm are the whole mini-batch's (other statistics are means over
    # micro-batches, which the ranks cut differently)
    for key in ("actor/loss", "actor/grad_norm"):
        assert two["stats"][key] == pytest.approx(one["stats"][key], rel=1e-5, abs=1e-7), key
    print(f"max |w_2rank - w_1proc| = {diff:.2e}, max |update| = {moved:.2e}")
    assert two["stats"]["actor/skipped_updates"] == one["stats"]["actor/skipped_updates"] == 0


RUN = OPS_TINY + [
    "train.steps=6",
    "ckpt.every=3",
    "ckpt.keep=0",
    "log.report=false",
    "train.strategy=fsdp",
    "train.world_size=2",
]


def _train_cmd(run_dir, cache, *extra):
    return [sys.executable, "-m", "rlvr.cli", "train", *RUN, f"run.dir={run_dir}", f"sft.cache_dir={cache}", *extra]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().split(")")[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.fixture(scope="module")
def fsdp_killed_and_resumed(tmp_path_factory):
    cache = sft_cache(tmp_path_factory)
    run_sft(load_config(None, RUN + [f"sft.cache_dir={cache}"]))  # once, before the ranks want it
    base = tmp_path_factory.mktemp("fsdp-resume")
    ref_dir, run_dir = base / "uninterrupted", base / "killed"
    logs = {name: open(base / f"{name}.log", "w") for name in ("ref", "victim", "resume")}
    ref = subprocess.Popen(_train_cmd(ref_dir, cache), stdout=logs["ref"], stderr=subprocess.STDOUT)
    victim = subprocess.Popen(_train_cmd(run_dir, cache), stdout=logs["victim"], stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while not logged_step(run_dir, 4):  # the step-3 checkpoint is on disk, step 4 is logged
        assert victim.poll() is None, (base / "victim.log").read_text()[-3000:]
        assert time.time() < deadline, "step 4 never logged"
        time.sleep(0.005)
    ranks = _children(victim.pid)
    victim.send_signal(signal.SIGKILL)  # the launcher: its ranks must go down with it
    victim.wait()
    deadline = time.time() + 30
    while any(_alive(r) for r in ranks) and time.time() < deadline:
        time.sleep(0.05)
    at_kill = {
        "returncode": victim.returncode,
        "ranks": ranks,
        "ranks_alive": [r for r in ranks if _alive(r)],
        "summary": (run_dir / "summary.json").exists(),
        "checkpoints": sorted(p.name for p in (run_dir / "checkpoints").iterdir()),
    }
    resumed = subprocess.run(
        _train_cmd(run_dir, cache, "ckpt.resume=auto"), stdout=logs["resume"], stderr=subprocess.STDOUT, timeout=300
    )
    assert resumed.returncode == 0, (base / "resume.log").read_text()[-3000:]
    assert ref.wait(timeout=300) == 0, (base / "ref.log").read_text()[-3000:]
    return {"ref": ref_dir, "run": run_dir, "at_kill": at_kill}


def test_a_killed_2_rank_run_resumes_from_its_shards_bit_exactly(fsdp_killed_and_resumed):
    ref, run, at_kill = (fsdp_killed_and_resumed[k] for k in ("ref", "run", "at_kill"))
    assert at_kill["returncode"] == -signal.SIGKILL and not at_kill["summary"]
    assert len(at_kill["ranks"]) == 2 and at_kill["ranks_alive"] == []  # no rank outlived its launcher
    assert "step_000003" in at_kill["checkpoints"]
    ckpt = run / "checkpoints" / "step_000003"
    assert (ckpt / "dcp").is_dir() and (ckpt / "rank_0.pt").exists() and (ckpt / "rank_1.pt").exists()
    assert not (ckpt / "model" / "model.safetensors").exists()  # shards only: nothing was gathered
    assert [e["step"] for e in events(run, "resume")] == [3]
    final_ref, final_run = (
        load_file(ref / "model" / "model.safetensors"),
        load_file(run / "model" / "model.safetensors"),
    )
    assert final_ref.keys() == final_run.keys()
    assert all(torch.equal(final_ref[k], final_run[k]) for k in final_ref)
    rows_ref, rows_run = metric_rows(ref), metric_rows(run)
    assert [r["step"] for r in rows_run] == [0, *range(1, 7), 6]
    assert rows_run == rows_ref
    assert (ref / "samples.jsonl").read_text() == (run / "samples.jsonl").read_text()


def test_the_2_rank_export_is_a_plain_transformers_model(fsdp_killed_and_resumed):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = fsdp_killed_and_resumed["ref"] / "model"
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    start = load_policy(
        load_config().model, json.loads((fsdp_killed_and_resumed["ref"] / "summary.json").read_text())["start_from"]
    )[0].state_dict()
    weights = model.state_dict()
    assert weights.keys() == start.keys()
    assert any(not torch.equal(weights[k], start[k]) for k in start)  # trained weights, not the start's
    ids = tok("3+4=", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > ids.shape[1]


def test_train_device_cuda_without_cuda_is_a_one_line_config_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "train", "train.device=cuda", f"run.dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlvr train: config error: train.device=cuda:"), done.stderr
    assert not (tmp_path / "metrics.jsonl").exists()


def test_fsdp_settings_that_are_not_built_are_config_errors():
    from rlvr.configlib import ConfigError

    for bad in (
        ["rollout.engine=vllm"],
        ["deploy.backend=ray", "eval.engine=vllm"],
        ["model.lora.enabled=true"],
        ["ckpt.async_write=true"],
    ):
        with pytest.raises(ConfigError):
            load_config(None, ["train.strategy=fsdp", *bad])
    with pytest.raises(ConfigError, match="train.strategy=fsdp"):
        load_config(None, ["train.world_size=2"])
    with pytest.raises(ConfigError, match="train.offload"):
        load_config(None, ["train.offload=true"])
    with pytest.raises(ConfigError, match="train.offload"):
        load_config(None, ["train.strategy=fsdp", "train.offload=true", "train.device=cpu"])
