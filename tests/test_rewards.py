"""Reward module pieces: extraction, format, process, composition, metrics, monitor."""

from __future__ import annotations

import math

import pytest
from helpers import checked_config

from rlvr.config import load_config
from rlvr.config.reward import FormatConfig, ProcessConfig, RewardConfig
from rlvr.configlib import ConfigError
from rlvr.records import Problem, RewardResult
from rlvr.rewards import (
    RewardMonitor,
    build_reward,
    compose,
    reward_metrics,
)
from rlvr.rewards.answers import Context, analyse
from rlvr.rewards.canonical import gold_text
from rlvr.rewards.extract import PARSE_FAILED, extract, find_boxed
from rlvr.rewards.format import FormatCheck
from rlvr.rewards.process import process_score
from rlvr.algos.standardize import standardize

BUILTIN = "<think>12+345: 2+5=7, 1+4=5, 0+3=3</think><answer>357</answer>"
ARITH = Problem(id="p", prompt="12+345=", answer="357", source="arithmetic")


# --- extraction ------------------------------------------------------------------------


def test_boxed_is_brace_matched_and_escaped_braces_are_literal():
    assert find_boxed(r"x \boxed{\frac{1}{2}} y \boxed{\{1,2\}}") == ([r"\frac{1}{2}", r"\{1,2\}"], False)
    assert find_boxed(r"\boxed{\frac{1}{2}") == ([], True)
    assert find_boxed(r"\boxed 5$") == (["5"], False)


def test_every_marker_counts_and_the_first_listed_policy_reads_an_overlap():
    policies = ["answer_tag", "boxed", "answer_line", "gsm8k"]
    ex = extract(r"\boxed{3} <answer>4</answer>", policies)
    assert (ex.answers, ex.policy) == (["3", "4"], "boxed+answer_tag")
    ex = extract(r"The answer is <answer>\boxed{4}</answer>", policies)
    assert (ex.answers, ex.policy) == (["4"], "answer_tag")
    ex = extract(r"\boxed{1} then \boxed{2} then \boxed{2}", policies)
    assert ex.answers == ["1", "2"] and ex.flag is None
    assert extract("#### 1,234", policies).answers == ["1,234"]
    assert extract("The answer is $7$.", policies).answers == ["7"]


def test_last_number_is_opt_in():
    assert extract("so it is 12 and then 13", ["boxed"]).flag == PARSE_FAILED
    assert extract("so it is 12 and then 13", ["boxed", "last_number"]).answers == ["13"]


def test_gold_markers_and_candidates():
    def gold(a):
        return analyse(gold_text(a), Context(), trusted=True)

    assert gold("约为3.14") == gold(r"\approx 3.14") == gold("approximately 3.14")
    assert gold("约为3.14").cands[0].decimals == 2 and gold("3.14").cands[0].decimals is None
    assert gold(r"\boxed{12}").cands[0].text == "12" and gold("#### 1,000").cands[0].text == "1000"
    assert [len(analyse(a).cands) for a in ("2 or 3", "1, 2, 3", "1,000", r"\{1, 2\}", "(1, 2)")] == [2, 3, 1, 2, 1]


# --- format ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,score",
    [
        (BUILTIN, 1.0),
        ("  <think>a</think>\n<answer>357</answer>\n", 1.0),
        ("<think>a</think><answer>357</answer> trailing", 0.0),
        ("<answer>357</answer>", 0.0),
        ("<think>a</think><answer>1</answer><answer>2</answer>", 0.0),
        ("<think>a<think>b</think></think><answer>1</answer>", 0.0),
        ("<think>a</think>text<answer>1</answer>", 0.0),
        ("<answer>1</answer><think>a</think>", 0.0),
        ("<think>a</think><answer> </answer>", 0.0),
        ("<think>a <answer>1</answer></think><answer>1</answer>", 0.0),
    ],
)
def test_think_answer_format_is_strict(text, score):
    assert FormatCheck(FormatConfig())(text) == score


@pytest.mark.parametrize(
    "text,score",
    [
        ("Here it is:\n```python\ndef f(x):\n    return x\n```\n", 1.0),
        ("```py\ndef f(x):\n    return x\n```", 1.0),
        ("```python\ndef f(x): ...\n```\nand also\n```python\nf(1)\n```", 0.0),  # two blocks
        ("```python\ndef f(x): ...\n``` trailing words", 0.0),
        ("```python\n  \n```", 0.0),  # empty
        ("```\ndef f(x): ...\n```", 0.0),  # no language
    ],
)
def test_code_answers_get_a_format_of_their_own(text, score):
    check = FormatCheck(FormatConfig())
    assert check(text, "code") == score
    assert check(text, "math") == 0.0  # and the math format never accepts a code answer
    think = FormatCheck(FormatConfig(code_kind="think_code_block"))
    assert think("<think>plan</think>\n" + text, "code") == score and think(text, "code") == 0.0
    assert FormatCheck(FormatConfig(code_kind="same"))(text, "code") == 0.0
    assert check("<think>a</think><answer>357</answer>", "code") == 0.0  # a math answer is not a code answer


def test_a_mixed_batch_scores_each_answer_by_its_verifiers_format():
    math_problem = Problem(id="m", prompt="1+1=", answer="2")
    code_problem = Problem(
        id="c",
        prompt="",
        verifier="code",
        tests={"type": "function", "entry_point": "f", "cases": [{"args": [1], "expected": 2}]},
    )
    with build_reward(RewardConfig()) as reward:
        m, c = reward.score(
            [math_problem, code_problem],
            ["<think>1+1=2</think><answer>2</answer>", "```python\ndef f(x):\n    return x + 1\n```"],
        )
    assert m.components == {"correct": 1.0, "format": 1.0} and c.components == {"correct": 1.0, "format": 1.0}
    assert m.total == c.total == pytest.approx(1.1)


def test_regex_and_json_formats():
    assert FormatCheck(FormatConfig(kind="regex", pattern=r"Answer: \d+"))("Answer: 12") == 1.0
    assert FormatCheck(FormatConfig(kind="regex", pattern=r"Answer: \d+"))("Answer: 12 !") == 0.0
    schema = '{"type": "object", "required": ["name", "age"], "properties": {"age": {"type": "integer"}}}'
    check = FormatCheck(FormatConfig(kind="json", json_schema=schema))
    assert check('<answer>{"name": "a", "age": 3}</answer>') == 1.0
    assert check('```json\n{"name": "a", "age": 3}\n```') == 1.0
    assert check('{"name": "a"}') == 0.0  # required field missing
    assert check('{"name": "a", "age": "3"}') == 0.0  # wrong type
    assert check('{"name": "a", "age": 3') == 0.0  # not JSON


# --- process ----------------------------------------------------------------------------


def test_process_scores_grounded_steps_and_takes_the_weakest():
    p = Problem(id="p", prompt="12+345=", answer="357")
    assert process_score(BUILTIN, p) == (1.0, 3)  # 0+3: a 0 padding the short column
    tiny = Problem(id="t", prompt="667+259=", answer="926")
    assert process_score("<think>7+9=16 6+5+1=12 6+2+1=9</think><answer>926</answer>", tiny) == (1.0, 3)  # carries
    # a trivially true step grounded in nothing earns nothing, alone or beside real work
    assert process_score("<think>1+1=2</think><answer>926</answer>", tiny) == (0.0, 1)
    assert process_score("<think>0+0=0</think><answer>926</answer>", tiny) == (0.0, 1)
    assert process_score("<think>1+1=2 7+9=16</think><answer>926</answer>", tiny, aggregate="mean") == (0.5, 2)
    wrong = "<think>7+9=16 6+5+1=13 6+2+1=9</think><answer>936</answer>"
    assert process_score(wrong, tiny) == (0.0, 3)  # min: one wrong step costs the chain
    assert process_score(wrong, tiny, aggregate="mean") == (pytest.approx(2 / 3), 3)
    q = Problem(id="q", prompt="What is 2*6 and 3*4?", answer="12")
    assert process_score("<think>2*6=12, 3*4=12 = 2*6, 3*4=13</think>", q, aggregate="mean") == (0.75, 4)
    assert process_score("<think>x=3, no arithmetic here</think>", p) == (0.0, 0)


def test_a_step_is_grounded_only_by_what_it_uses_and_restating_the_prompt_earns_nothing():
    p = Problem(id="p", prompt="What is 12+345?", answer="357")  # digits 1 and 2 in the prompt
    assert process_score("<think>1+1=2</think>", p) == (0.0, 1)  # no column of 12 and 345 holds 1 and 1
    assert process_score("<think>2+1=3</think>", p) == (0.0, 1)  # two digits of the same number
    assert process_score("<think>2+5=7</think>", p) == (1.0, 1)  # the units column
    m = Problem(id="m", prompt="482193*39=", answer="18805527")
    assert process_score("<think>482193*9=4339737, 482193*3=1446579</think>", m) == (1.0, 2)  # partial products
    assert process_score("<think>3*9=27</think>", m) == (1.0, 1)  # the units digits, as long multiplication starts
    assert process_score("<think>4*4=16</think>", m) == (0.0, 1)  # digits of the prompt that no column pairs
    r = Problem(id="r", prompt="We know that 6*7=42. What is 42+8?", answer="50")
    assert process_score("<think>6*7=42</think><answer>50</answer>", r) == (0.0, 0)  # the prompt's own fact
    assert process_score("<think>6 * 7 = 42, 42+8=50</think><answer>50</answer>", r) == (1.0, 1)
    s = Problem(id="s", prompt="If 12+3=15, what is 15*2?", answer="30")
    assert process_score("<think>2+3=1</think>", s) == (0.0, 1)  # inside a stated equality, still a (false) step
    assert process_score("<think>15*1=15, 15-15=0, 15*0=0</think>", s) == (0.0, 0)  # true whatever the numbers


def shouting(steps, problem):
    """A process scorer of one's own (reward.process.scorer=test_rewards:shouting): a step in capitals
    is wrong, a step without letters is not checkable."""
    return [None if not any(c.isalpha() for c in s) else 0.0 if s.isupper() else 1.0 for s in steps]


def test_process_scorer_of_ones_own_by_import_path():
    cfg = RewardConfig(
        weights={"process": 1.0, "format": 0.0, "correct": 0.0},
        process=ProcessConfig(scorer="test_rewards:shouting", aggregate="mean"),
    )
    text = "<think>first we add\nTHEN WE GUESS\n= 42\nand check</think><answer>42</answer>"
    (r,) = build_reward(cfg).score([Problem(id="p", prompt="q", answer="42")], [text])
    assert r.components["process"] == pytest.approx(2 / 3) and r.info["process_checked"] == 3
    with pytest.raises(ConfigError, match="reward.process.scorer 'nowhere:fn': cannot import it"):
        build_reward(RewardConfig(weights={"process": 1.0}, process=ProcessConfig(scorer="nowhere:fn")))


# --- composition ------------------------------------------------------------------------


def test_builtin_task_shape_scores_full_marks_without_workers():
    reward = build_reward(RewardConfig())
    texts = [BUILTIN, "<think>t</think><answer>358</answer>", "357", "<think>t</think><answer>357</answer>!"]
    res = reward.score([ARITH] * 4, texts)
    assert [r.components for r in res] == [
        {"correct": 1.0, "format": 1.0},
        {"correct": 0.0, "format": 1.0},
        {"correct": 0.0, "format": 0.0},
        {"correct": 1.0, "format": 0.0},
    ]
    assert [r.total for r in res] == pytest.approx([1.1, 0.1, 0.0, 1.0])
    assert not reward.verifier("math").pool_started  # plain integers never start a worker
    reward.close()


def test_weights_merge_over_defaults_and_unknown_components_are_refused():
    cfg = load_config(None, ["reward.weights.process=0.5"])
    assert cfg.reward.weights == {"format": 0.1, "correct": 1.0, "process": 0.5}
    res = build_reward(cfg.reward).score([ARITH], [BUILTIN])[0]
    assert res.components["process"] == 1.0 and res.total == pytest.approx(1.6)
    with pytest.raises(ConfigError, match="reward.*unknown component"):
        checked_config(None, ["reward.weights.style=1"])
    with pytest.raises(ConfigError, match="reward.math.*extract"):
        load_config(None, ["reward.math.extract=[boxed,guess]"])


def test_exceptions_mark_the_sample_invalid_and_never_raise(monkeypatch):
    class Broken:
        def verify(self, problems, texts):
            raise RuntimeError("boom")

    def missing(cfg):
        raise ImportError("No module named 'rlvr.sandbox.verifier'")

    monkeypatch.setitem(compose.VERIFIERS, "code", missing)
    reward = build_reward(RewardConfig())
    reward._verifiers["math"] = Broken()
    res = reward.score(
        [
            ARITH,
            Problem(id="c", prompt="", tests={"x": 1}, verifier="code"),
            Problem(id="u", prompt="", answer="1", verifier="nope"),
        ],
        [BUILTIN] * 3,
    )
    assert [r.valid for r in res] == [False, False, False] and all(r.total == 0.0 for r in res)
    assert "boom" in res[0].error and "not available" in res[1].error and "unknown verifier" in res[2].error
    assert res[0].components["format"] == 1.0  # the other components are still reported
    assert build_reward(RewardConfig()).score([Problem(id="n", prompt="")], ["x"])[0].valid is False


def test_group_normalisation():
    assert standardize([1, 0, 1, 0, 5, 5], [0, 0, 0, 0, 1, 1], [True] * 6) == pytest.approx(
        [1, -1, 1, -1, 0, 0], abs=1e-5
    )
    cfg = RewardConfig(normalize="group")
    texts = [BUILTIN, "<think>t</think><answer>358</answer>", "357", "nothing"]
    res = build_reward(cfg).score([ARITH] * 4, texts, group_ids=[0, 0, 1, 1])
    # group 0: same format, different outcome, so the outcome decides; group 1: no signal at all
    assert res[0].total > 0 > res[1].total
    assert res[2].total == pytest.approx(0.0) and res[3].total == pytest.approx(0.0)


# --- metrics and monitor ---------------------------------------------------------------------


def _results(values, flags=None):
    flags = flags or [None] * len(values)
    return [
        RewardResult(total=v, components={"correct": v}, info={"parse_failed": f == "pf"})
        if f != "bad"
        else RewardResult.invalid("x", {"correct": 0.0})
        for v, f in zip(values, flags)
    ]


def test_reward_metrics_per_source():
    probs = [Problem(id=str(i), prompt="", answer="1", source=s) for i, s in enumerate("aabb")]
    m = reward_metrics(probs, _results([1.0, 0.0, 0.0, 1.0], [None, "pf", "bad", None]))
    assert m["reward/mean"] == pytest.approx(2 / 3) and m["reward/invalid_frac"] == 0.25
    assert m["reward/parse_failed_frac"] == 0.25 and m["reward/std"] == pytest.approx(math.sqrt(2) / 3)
    assert m["reward/source/a/correct_mean"] == 0.5 and m["reward/source/a/parse_failed_frac"] == 0.5
    assert m["reward/source/b/mean"] == 1.0 and m["reward/source/b/invalid_frac"] == 0.5
    assert m["reward/correct/mean"] == pytest.approx(2 / 3)


def test_agreement_is_the_rank_correlation_between_components_over_the_batch():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from rlvr.rewards.monitor import agreement, spearman

    def batch(rows):
        return [RewardResult(total=0.0, components=dict(zip(("correct", "format", "judge"), r))) for r in rows]

    # judge ranks like correct (ties shared), format ranks against it, one invalid sample left out
    rows = [(1.0, 0.0, 0.9), (0.0, 1.0, 0.1), (1.0, 0.0, 0.8), (0.0, 1.0, 0.3)]
    m = agreement([*batch(rows), RewardResult.invalid("timeout", {"correct": 1.0, "format": 1.0, "judge": 0.0})])
    assert m["reward/agreement/correct_vs_judge"] == pytest.approx(math.sqrt(0.8))  # 2 tied pairs against 4 ranks
    assert m["reward/agreement/correct_vs_format"] == pytest.approx(-1.0)
    assert m["reward/agreement/format_vs_judge"] == pytest.approx(-math.sqrt(0.8))
    assert m["reward/agreement/mean"] == pytest.approx(-1 / 3)  # the mean over the pairs: (-1 + r - r) / 3
    assert "reward/agreement/mean" not in agreement(batch([(1.0, 1.0, 0.5)] * 4))  # nothing varies: no correlation

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.integers(-9, 9), st.integers(-9, 9)), min_size=2, max_size=30))
    def symmetric_and_bounded(pairs):
        a, b = [x for x, _ in pairs], [y for _, y in pairs]
        rho = spearman(a, b)
        if rho is not None:
            assert -1 - 1e-9 <= rho <= 1 + 1e-9 and rho == pytest.approx(spearman(b, a))
            assert spearman(a, [2 * x + 1 for x in a]) == pytest.approx(1.0)  # any increasing map: 1

    symmetric_and_bounded()


def test_monitor_alerts_once_when_one_source_is_stuck_at_zero():
    mon = RewardMonitor(stuck_steps=3)
    step = {"reward/source/zh/correct_mean": 0.0, "reward/source/gsm8k/correct_mean": 0.4}
    alerts = [mon.update(s, step) for s in range(5)]
    assert [len(a) for a in alerts] == [0, 0, 1, 0, 0] and "'zh'" in alerts[2][0]
    mon.update(5, {"reward/source/zh/correct_mean": 0.1, "reward/source/gsm8k/correct_mean": 0.4})
    assert mon.update(6, step) == []  # the streak restarted
    everyone_zero = {"reward/source/a/correct_mean": 0.0, "reward/source/b/correct_mean": 0.0}
    quiet = RewardMonitor(stuck_steps=2)
    assert all(quiet.update(s, everyone_zero) == [] for s in range(5))  # hard data, not a mismatch


def test_tolerance_is_explicit_and_configurable_but_integers_stay_exact():
    from rlvr.config.reward import MathConfig
    from rlvr.rewards.math_verifier import MathVerifier

    def correct(cfg, gold, answer):
        v = MathVerifier(cfg)
        r = v.verify([Problem(id="t", prompt="", answer=gold)], [rf"\boxed{{{answer}}}"])[0]
        assert not v.pool_started  # all of these are fast-path answers
        return r.components["correct"]

    default, loose, absolute = MathConfig(), MathConfig(rel_tol=0.02), MathConfig(rel_tol=0.0, abs_tol=0.01)
    assert correct(default, r"\frac{1}{3}", "0.33") == 0.0 and correct(loose, r"\frac{1}{3}", "0.33") == 1.0
    assert correct(absolute, "2.5", "2.509") == 1.0 and correct(absolute, "2.5", "2.52") == 0.0
    assert correct(loose, "100", "101") == 0.0 and correct(loose, "100", "100.5") == 0.0  # integers exact


@pytest.mark.parametrize(
    "answer",
    [
        "12",
        "-3.5",
        r"\frac{3}{4}",
        "3/4",
        r"2\sqrt{3}",
        r"\sqrt{5}",
        "x = 5",
        "x=-2",
        r"50\%",
        r"-2.5\%",
        "(1, 2]",
        "[3,-4)",
        "(1, 2)",
    ],
)
@pytest.mark.parametrize("trusted", [False, True])
def test_plain_forms_read_at_once_as_the_full_reading_would(monkeypatch, answer, trusted):
    from rlvr.rewards import answers

    fast = answers._analyse.__wrapped__(answer, Context(), trusted)
    for name in ("_PLAIN_RE", "_PLAIN_PERCENT_RE", "_PLAIN_PAIR_RE"):
        monkeypatch.setattr(answers, name, answers.re.compile("(?!)"))
    assert answers._analyse.__wrapped__(answer, Context(), trusted) == fast
