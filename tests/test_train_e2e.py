import json
import math

import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.stats import mcnemar_exact
from rlvr.assembly import run_sft, train

REQUIRED_METRICS = [
    "reward/mean",
    "reward/std",
    "reward/correct/mean",
    "reward/format/mean",
    "reward/invalid_frac",
    "rollout/len_mean",
    "rollout/len_p90",
    "rollout/truncated_frac",
    "rollout/zero_std_frac",
    "actor/loss",
    "actor/kl",
    "actor/entropy",
    "actor/clip_frac",
    "actor/grad_norm",
    "actor/lr",
    "perf/step_s",
    "perf/rollout_tok_s",
    "time/rollout_s",
    "time/reward_s",
    "time/update_s",
]


def test_grpo_steps_change_parameters_and_write_the_run_dir(tiny_overrides):
    cfg = load_config(None, tiny_overrides + ["algo.beta=0.04"])  # with a reference model and KL
    start = run_sft(cfg)
    summary = train(cfg)
    run = cfg.run_dir
    assert summary["status"] == "completed" and summary["steps"] == 3
    for name in ["config.yaml", "metrics.jsonl", "events.jsonl", "samples.jsonl", "summary.json"]:
        assert (run / name).exists(), name
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    keys = {k for r in rows for k in r}  # no key is also a folder of keys (MLflow's file store holds neither)
    assert not [k for k in keys if any(o.startswith(k + "/") for o in keys)]
    for r in steps:
        for key in REQUIRED_METRICS:
            assert key in r and math.isfinite(r[key]), key
        # the components' agreement exists exactly when both vary over the batch, as a rank correlation
        assert ("reward/agreement/mean" in r) == (r["reward/format/std"] > 0 and r["reward/correct/std"] > 0)
        assert -1 <= r.get("reward/agreement/correct_vs_format", 0) == r.get("reward/agreement/mean", 0) <= 1
    saved = json.loads((run / "summary.json").read_text())
    for key in ["status", "steps", "wall_time_s", "eval_before", "eval_after"]:
        assert key in saved
    assert set(saved["eval_after"]) == {"accuracy", "n"} and saved["eval_after"]["n"] == 24
    # eval.jsonl: each evaluation's outcome per problem; the summary's paired test is computed from them
    evals = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    first, last = [r for r in evals if r["step"] == 0], [r for r in evals if r["step"] == 3]
    assert len(first) == len(last) == 24 and [r["id"] for r in first] == [r["id"] for r in last]
    assert sum(r["correct"] for r in last) / 24 == saved["eval_after"]["accuracy"]
    only_before = sum(a["correct"] and not b["correct"] for a, b in zip(first, last))
    only_after = sum(b["correct"] and not a["correct"] for a, b in zip(first, last))
    change = saved["eval_change"]
    assert (change["only_before"], change["only_after"]) == (only_before, only_after)
    assert change["diff"] == pytest.approx((only_after - only_before) / 24)
    assert change["mcnemar_p"] == pytest.approx(mcnemar_exact(only_before, only_after))
    # the final weights differ from the starting point
    before = load_file(start / "model.safetensors")
    after = load_file(run / "model" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000002", "step_000003"]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert {"completion", "reward", "components", "advantage"} <= set(samples[0])


def test_cli_smoke_and_sft_cache_reuse(tiny_overrides, capsys):
    tiny_overrides = tiny_overrides + ["sft.steps=60"]  # a config no other test has cached
    assert main(["sft", *tiny_overrides]) == 0
    first = capsys.readouterr().out
    assert main(["sft", *tiny_overrides]) == 0  # second call reuses the cache
    second = capsys.readouterr().out
    assert "sft step" in first and "sft step" not in second
    assert main(["train", *tiny_overrides, "train.steps=1", "ckpt.every=0"]) == 0


def test_first_run_and_a_run_on_the_cached_cold_start_sample_the_same(tiny_overrides, tmp_path):
    # the first run does cold-start SFT in its own process (drawing from the global generators);
    # the second finds it cached: both must train on the same samples
    cache = [
        f"sft.cache_dir={tmp_path / 'own-cache'}",
        "train.steps=2",
        "ckpt.every=0",
        "log.report=false",
        "log.tensorboard=false",
        "eval.n=8",
    ]
    threads = torch.get_num_threads()
    try:
        train(load_config(None, tiny_overrides + cache + [f"run.dir={tmp_path / 'first'}"]))
        train(load_config(None, tiny_overrides + cache + [f"run.dir={tmp_path / 'second'}"]))
    finally:
        torch.set_num_threads(threads)

    def steps(name):
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return [(r["reward/mean"], r["rollout/len_mean"], r["actor/loss"]) for r in rows if "reward/mean" in r]

    assert steps("first") == steps("second")


@pytest.mark.parametrize(
    "argv",
    [["train", "model.name=/nonexistent/model"], ["eval", "/nonexistent/model"], ["train", "model.name=./no-such-dir"]],
)
def test_a_missing_model_directory_is_a_one_line_config_error(argv, tmp_path, capsys):
    assert main([*argv, f"run.dir={tmp_path / 'run'}", f"sft.cache_dir={tmp_path / 'sft'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rlvr {argv[0]}: config error: model") and "no such directory" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
