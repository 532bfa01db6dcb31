"""The built-in code task: worked solutions pass their tests, the teacher's misconceptions fail them,
the held-out split never trains, the tiny tokenizer spells every character, answers get the code format."""

from __future__ import annotations

import itertools
import random

import pytest

from rlvr.assembly import run_task
from rlvr.config import load_config
from rlvr.models.tiny import build_tokenizer
from rlvr.rewards import build_reward
from rlvr.tasks import needs_code_chars, teacher_solution
from rlvr.tasks.code import FAMILIES, CodeTask


def pair(p):
    return p.metadata["family"], p.metadata["k"]


def test_held_out_pairs_never_train_and_every_family_has_unusual_inputs():
    task = CodeTask(eval_size=500, seed=0)
    held = task.held_out()
    assert len(held) == len({p.id for p in held}) > 200 and len({p.tests["entry_point"] for p in held}) == 8
    train = list(itertools.islice(task.train_stream(seed=0), 3000))
    assert not {pair(p) for p in held} & {pair(p) for p in train}  # a held-out pair is unseen under every name
    assert {p.metadata["family"] for p in train} == {f.name for f in FAMILIES}
    assert CodeTask(eval_size=500, seed=0).held_out() == held  # fixed by the seed
    assert {pair(p) for p in CodeTask(eval_size=500, seed=1).held_out()} != {pair(p) for p in held}
    for f in FAMILIES:
        inputs = f.inputs(5)
        unusual = [
            x
            for x in inputs
            if x in (0, -7, 10**6, "", "a", [], [0])
            or (isinstance(x, str) and " " in x)
            or (isinstance(x, list) and any(v < 0 for v in x))
        ]
        assert len(unusual) >= 3, f.name


def test_worked_solutions_pass_and_every_misconception_fails_in_the_sandbox():
    cfg = load_config(None, ["task.name=code"])
    problems = [CodeTask()._problem(f.name, k, "g", "train") for f in FAMILIES for k in f.k_range]
    with build_reward(cfg.reward) as reward:
        gold = reward.score(problems, [p.metadata["solution"] for p in problems])
        wrong = reward.score(problems, [teacher_solution(p, 2.0, random.Random(0)) for p in problems])
    assert all(r.valid and r.components == {"correct": 1.0, "format": 1.0} for r in gold)
    assert all(r.valid and r.components["correct"] < 1.0 and r.components["format"] == 1.0 for r in wrong)


def test_the_teacher_errs_more_often_on_harder_families():
    rng = random.Random(0)
    task = CodeTask()
    for f in FAMILIES:
        p = task._problem(f.name, f.k_range[0], "f", "train")
        wrong = sum(teacher_solution(p, 0.6, rng) != p.metadata["solution"] for _ in range(400)) / 400
        assert abs(wrong - 0.3 * f.level) < 0.08, (f.name, wrong)


def test_the_tiny_tokenizer_spells_code_only_for_the_code_task():
    assert (
        needs_code_chars("code")
        and needs_code_chars("arithmetic+code")
        and not needs_code_chars(load_config().task.name)
    )
    code, plain = build_tokenizer(code_chars=True), build_tokenizer()
    task = CodeTask()
    for p in task.held_out():
        assert code.unk_token_id not in code(p.prompt + p.metadata["solution"]).input_ids
    assert plain.unk_token_id in plain("```python").input_ids
    # the arithmetic ids stay where they were (only <|unk|> moves to the end)
    assert all(code.get_vocab()[t] == i for t, i in plain.get_vocab().items() if t != "<|unk|>")


@pytest.mark.parametrize("overrides", [["task.name=code"]])
def test_the_code_task_is_a_built_in_task(overrides):
    task = run_task(load_config(None, overrides))
    p = task.held_out()[0]
    assert p.verifier == "code" and p.tests["type"] == "function" and len(p.tests["cases"]) == 5


def test_math_and_code_together_mix_six_to_four_unless_data_mix_says_otherwise():
    from collections import Counter

    from rlvr.configlib import ConfigError
    from rlvr.tasks.files import DataError

    task = run_task(load_config(None, ["task.name=arithmetic+code", "eval.n=100"]))
    held = task.held_out()
    assert Counter(p.source for p in held) == {"arithmetic": 60, "code": 40}
    assert Counter(p.source for p in held[:10]) == {"arithmetic": 6, "code": 4}  # interleaved: a prefix keeps it
    drawn = Counter(p.source for p in itertools.islice(task.train_stream(seed=0), 50))
    assert drawn == {"arithmetic": 30, "code": 20}
    assert not {p.prompt for p in held} & {p.prompt for p in itertools.islice(task.train_stream(seed=0), 2000)}
    even = run_task(load_config(None, ["task.name=arithmetic+code", "data.mix={arithmetic: 1, code: 1}"]))
    assert Counter(p.source for p in itertools.islice(even.train_stream(seed=0), 50)) == {"arithmetic": 25, "code": 25}
    with pytest.raises(DataError, match="unknown"):
        run_task(load_config(None, ["task.name=arithmetic+code", "data.mix={math: 1, code: 1}"]))
    with pytest.raises(ConfigError, match="data.mix"):
        run_task(load_config(None, ["task.name=code", "data.mix={code: 1}"]))
    with pytest.raises(ConfigError, match="arithmetic\\+code"):
        run_task(load_config(None, ["task.name=arithmetic+poetry"]))


def test_evaluation_reports_each_source_and_counts_code_only_when_every_test_passes():
    from rlvr.evaluate import eval_metrics, evaluate
    from rlvr.records import Completion

    cfg = load_config(None, ["task.name=arithmetic+code", "eval.n=10"])
    problems = run_task(cfg).held_out()

    class Scripted:  # answers each problem with its worked solution, except every second code one
        def generate(self, ps, params, group_offset=0):
            out = []
            for i, p in enumerate(ps):
                text = p.metadata["solution"]
                if p.source == "code" and i % 2:
                    text = text.replace(" return ", " return 1+")  # some cases may still pass: not a pass
                out.append(Completion(p.id, i, 0, text, [], [1], [0.0], "stop"))
            return out

    with build_reward(cfg.reward) as reward:
        ev = evaluate(Scripted(), problems, reward, max_new_tokens=48)
    code = [i for i, p in enumerate(problems) if p.source == "code"]
    assert ev["by_source"] == {"arithmetic": 1.0, "code": sum(i % 2 == 0 for i in code) / len(code)}
    m = eval_metrics(ev)
    assert m["eval/source/code/accuracy"] == ev["by_source"]["code"] and m["eval/accuracy"] == ev["accuracy"]


def test_the_code_preset_is_a_valid_config_of_the_code_task():
    from pathlib import Path

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "code.yaml")
    assert cfg.task.name == "code" and cfg.rollout.batch_size == 16 and cfg.train.lr_schedule == "cosine"
