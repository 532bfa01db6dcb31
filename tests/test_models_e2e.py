"""`rlvr train` end to end on a locally created model directory and a data file: LoRA with a
KL reference (the adapter switched off), per-source metrics, peak memory, merged export, resume."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

pytest.importorskip("peft")

from rlvr.cli import main  # noqa: E402
from rlvr.config import load_config  # noqa: E402
from rlvr.ops.report import recommended_length  # noqa: E402
from rlvr.assembly import train  # noqa: E402
from test_models import save_tiny  # noqa: E402


def _data(path):
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i), "source": "add"} for i in range(12)]
    rows += [
        {"messages": [{"role": "user", "content": f"{i}*2="}], "answer": str(2 * i), "source": "mul"} for i in range(12)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _overrides(tmp_path, *extra):
    return [
        f"model.name={tmp_path / 'base'}",
        f"task.name={tmp_path / 'd.jsonl'}",
        f"run.dir={tmp_path / 'run'}",
        "data.mix={add: 1, mul: 1}",
        "data.eval_size=4",
        "data.system_prompt=Answer in <answer></answer>.",
        "sft.steps=50",  # asked for, but data files carry no solutions: SFT must not run
        "rollout.batch_size=2",
        "rollout.group_size=4",
        "rollout.max_new_tokens=6",
        "train.steps=2",
        "train.micro_batch_size=2",
        "train.threads=1",
        "eval.n=4",
        "eval.every=0",
        "ckpt.every=1",
        "run.progress=false",
        "log.tensorboard=false",
        "log.report=false",
        "reward.format.kind=regex",
        r"reward.format.pattern=.*\d.*",  # random text has a digit about half the time
        "reward.math.extract=[answer_tag,last_number]",
        *extra,
    ]


def test_lora_run_on_a_data_file_exports_a_merged_model_and_resumes(tmp_path, capsys):
    save_tiny(tmp_path / "base")
    _data(tmp_path / "d.jsonl")
    cfg = load_config(None, _overrides(tmp_path, "model.lora.enabled=true", "model.lora.r=4", "algo.beta=0.1"))
    summary = train(cfg)
    assert summary["status"] == "completed" and summary["steps"] == 2
    assert summary["start_from"] == str(tmp_path / "base")  # no SFT stage
    run = tmp_path / "run"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step1 = next(m for m in metrics if m.get("step") == 1)
    assert 0 < step1["perf/peak_rss_gb"] < 64
    assert {"reward/source/add/n", "reward/source/mul/n"} <= set(step1)  # 1 prompt of each source per step
    assert "actor/kl" in step1
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    loaded = next(e for e in events if e["kind"] == "data_loaded")
    assert loaded["train"] == {"add": 10, "mul": 10} and loaded["mix"] == {"add": 0.5, "mul": 0.5}
    ckpt = run / "checkpoints" / "step_000002" / "model"
    assert (ckpt / "adapter_model.safetensors").is_file() and not (ckpt / "model.safetensors").exists()
    # the export is a plain, merged model that generates with its chat template
    model = AutoModelForCausalLM.from_pretrained(run / "model")
    tok = AutoTokenizer.from_pretrained(run / "model")
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "2*2="}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > ids["input_ids"].shape[1]
    # the run's recommended length (1.2 x P90) is the export's generation default, which `rlvr eval` of
    # the run takes with no flag; a configured length wins; --device cuda without CUDA is a one-line error
    rec = recommended_length(metrics, None)["tokens"]
    assert model.generation_config.max_new_tokens == rec != load_config(None, []).rollout.max_new_tokens
    evaluate = ["eval", str(run), "--data", str(tmp_path / "d.jsonl"), "--limit", "2", "data.chat=false"]
    capsys.readouterr()
    assert main(evaluate) == 0
    assert f"cpu, compute float32, max_new_tokens {rec} (the model's generation_config.json" in capsys.readouterr().err
    assert main([*evaluate, "rollout.max_new_tokens=3"]) == 0
    assert "max_new_tokens 3 (rollout.max_new_tokens)" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main([*evaluate, "--device", "cuda"]) == 2
        err = capsys.readouterr().err.strip()
        assert "train.device=cuda" in err and len(err.splitlines()) == 1
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    assert not torch.equal(model.model.layers[0].self_attn.q_proj.weight, base.model.layers[0].self_attn.q_proj.weight)
    # resuming loads the adapter from the newest checkpoint and continues
    cfg = load_config(
        None,
        _overrides(
            tmp_path, "model.lora.enabled=true", "model.lora.r=4", "algo.beta=0.1", "train.steps=3", "ckpt.resume=auto"
        ),
    )
    assert train(cfg)["steps"] == 3
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "resume" and e["step"] == 2 for e in events)
