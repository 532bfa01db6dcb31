"""Learned rewards: a reward model trained with `rlvr rm train`, scored beside the rules, moving what
the verifier does not see; its failures mark samples invalid, never the run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.configlib import ConfigError
from rlvr.records import Problem
from rlvr.train.rm import load_pairs
from rlvr.tasks.files import DataError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_learned_reward import SMALL, run  # noqa: E402


def test_a_reward_model_moves_the_property_it_prefers_and_correctness_holds(tmp_path):
    """bench/bench_learned_reward.py at its small size: the marker rate of sampled completions rises
    while held-out greedy correctness does not fall significantly (exact McNemar, 5%)."""
    r = run(tmp_path, **SMALL)
    assert r["rm_pair_accuracy"] >= 0.9  # the reward model learned the preference on held-out pairs
    assert r["marker_rate_after"] >= r["marker_rate_before"] + 0.15, r
    change = r["correct_change"]
    assert not (change["diff"] < 0 and change["mcnemar_p"] < 0.05), r
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "reward/mean" in row]
    assert all("reward/marker/mean" in row and "reward/marker/raw_mean" in row for row in steps)
    assert all(row["reward/marker/failed"] == 0 and row["reward/invalid_frac"] == 0 for row in steps)
    assert any("reward/agreement/correct_vs_marker" in row for row in steps)  # compared with the verifier
    assert steps[-1]["reward/marker/raw_mean"] > steps[0]["reward/marker/raw_mean"]
    # the same model through `rlvr eval --pairs`: its pair accuracy on every pair
    assert (
        main(
            [
                "eval",
                str(tmp_path / "rm"),
                "--pairs",
                str(tmp_path / "pairs.jsonl"),
                "--out",
                str(tmp_path / "pairs.json"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "pairs.json").read_text())["pair_accuracy"] >= 0.9


def test_a_failing_reward_model_marks_its_samples_invalid_and_the_run_goes_on(tmp_path):
    from rlvr.inference.reward_models import LearnedReward
    from rlvr.rewards import build_reward

    class Flaky:  # a reward model whose second batch fails and whose third scores NaN
        cfg = type("Cfg", (), {"batch_size": 2, "weight": 0.5, "normalize": "batch"})()

        def score(self, problems, texts):
            return (
                [float(len(t)) for t in texts[:2]]
                + [RuntimeError("CUDA error: device-side assert")] * 2
                + [float("nan")] * 2
            )

    class Broken:
        cfg = type("Cfg", (), {"batch_size": 2, "weight": 0.5, "normalize": "batch"})()

        def score(self, problems, texts):
            raise OSError("model file vanished")

    probs = [Problem(id=str(i), prompt=f"{i}+0=", answer=str(i)) for i in range(6)]
    texts = [f"<think>x</think><answer>{i}</answer>" + "!" * i for i in range(6)]
    with LearnedReward(build_reward(), {"style": Flaky()}) as reward:
        results = reward.score(probs, texts)
        metrics = reward.metrics()
    assert [r.valid for r in results] == [True, True, False, False, False, False]
    assert "CUDA error" in results[2].error and "non-finite score nan" in results[4].error
    assert all(r.total == 0.0 for r in results[2:]) and metrics["reward/style/failed"] == 4
    assert results[0].components["style"] == pytest.approx(-1.0, abs=1e-5)  # z-scores of the two valid samples
    assert results[1].components["style"] == pytest.approx(1.0, abs=1e-5)
    assert results[1].total == pytest.approx(
        results[1].components["correct"] + 0.1 * results[1].components["format"] + 0.5
    ) and results[1].info["style_raw"] == len(texts[1])
    with LearnedReward(build_reward(), {"style": Broken()}) as reward:
        assert all(not r.valid and "model file vanished" in r.error for r in reward.score(probs, texts))


def test_pairs_files_and_reward_model_settings_are_checked(tmp_path):
    ok = [
        {"prompt": "q", "chosen": "a", "rejected": "b"},
        {
            "chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}],
        },
    ]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ok))
    first, second = load_pairs(tmp_path / "p.jsonl")
    assert (first.prompt, first.chosen) == ("q", "a") and second.prompt == [{"role": "user", "content": "q"}]
    bad = {
        "chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        "rejected": [{"role": "user", "content": "other"}, {"role": "assistant", "content": "b"}],
    }
    (tmp_path / "bad.jsonl").write_text(json.dumps(ok[0]) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: without 'prompt'"):
        load_pairs(tmp_path / "bad.jsonl")
    from rlvr.config import load_config

    with pytest.raises(ConfigError, match=r"reward.models: \[.correct.\] already name rule components"):
        load_config(None, ["reward.models.correct.path=/x"])
    with pytest.raises(ConfigError, match=r"reward.models.style.path: the reward model's directory is required"):
        load_config(None, ["reward.models.style.weight=0.2"])
    assert load_config(None, ["reward.models.style.path=/x", "deploy.backend=ray"])  # on the inference pool


def test_a_local_judge_generates_on_an_rlvr_engine_and_reads_its_score(tmp_path):
    import re

    from rlvr.config import load_config
    from rlvr.inference.judge import Judge, JudgeError
    from rlvr.models.tiny import save_tiny

    save_tiny(tmp_path / "judge", hidden=32, layers=1, heads=2)
    cfg = load_config(
        None,
        [
            f"reward.judges.j.model={tmp_path / 'judge'}",
            "reward.judges.j.max_tokens=12",
            r"reward.judges.j.score_pattern=(\d)",
            "reward.judges.j.max_score=9",
        ],
    )
    judge = Judge("j", cfg.reward.judges["j"])
    probs = [Problem(id=str(i), prompt=f"{i}+1=", answer=str(i + 1)) for i in range(5)]
    out = judge.score(probs, [f"<answer>{i + 1}</answer>" for i in range(5)])
    assert len(judge.replies) == 5  # one greedy answer each, from the model itself
    for i, v in enumerate(out):
        found = re.findall(r"(\d)", judge.replies[i])
        assert v == pytest.approx(int(found[-1]) / 9) if found else isinstance(v, JudgeError)


def test_a_run_whose_reward_model_fails_completes_with_the_samples_invalid(tiny_overrides, monkeypatch):
    """Every other scoring call of the reward model raises (an OOM, a device error): those samples
    are invalid and counted, the others train, and the run completes."""
    from rlvr.inference import reward_models
    from rlvr.models.tiny import build_tokenizer

    calls = []

    def flaky(model, tokenizer, texts, **kwargs):
        calls.append(len(texts))
        if len(calls) % 2 == 0:
            raise RuntimeError("CUDA out of memory")
        return [float(len(t)) for t in texts]

    monkeypatch.setattr(reward_models, "load_reward_model", lambda path, device: (None, build_tokenizer()))
    monkeypatch.setattr(reward_models, "score_texts", flaky)
    assert (
        main(
            [
                "train",
                *tiny_overrides,
                "train.steps=2",
                "reward.models.style.path=rm-dir",
                "reward.models.style.batch_size=8",
            ]
        )
        == 0
    )
    run = Path([o.split("=", 1)[1] for o in tiny_overrides if o.startswith("run.dir=")][0])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 2 and json.loads((run / "summary.json").read_text())["status"] == "completed"
    for r in steps:
        assert r["reward/style/failed"] > 0 and r["reward/invalid_frac"] == pytest.approx(r["reward/style/failed"] / 16)


def test_a_completion_full_of_placeholders_never_shows_the_judge_the_gold():
    """The rubric's slots are filled in one pass: `{answer}` written by the policy stays those words."""
    from rlvr.config import load_config
    from rlvr.inference.judge import Judge

    class Recorder:
        def complete(self, messages):
            self.messages = messages
            return ["9"] * len(messages)

    cfg = load_config(
        None,
        [
            "reward.judges.j.base_url=http://127.0.0.1:9/v1",
            "reward.judges.j.model=m",
            "reward.judges.j.rubric=Q: {prompt} A: {completion} Gold: {answer}",
            r"reward.judges.j.score_pattern=(\d)",
            "reward.judges.j.max_score=9",
        ],
    )
    client = Recorder()
    judge = Judge("j", cfg.reward.judges["j"], client=client)
    sly = "The gold is {answer}; the question was {prompt}; again {completion} {answer}"
    judge.score([Problem(id="p", prompt="What is {answer}?", answer="4217")], [sly])
    assert client.messages == [f"Q: What is {{answer}}? A: {sly} Gold: 4217"]
    assert client.messages[0].count("4217") == 1
