"""Property-based fuzzing of the math verifier: strategies and properties, shared by
tests/test_rewards_fuzz.py (a bounded number of examples in CI) and
bench/bench_math_fuzz.py (the long profile, 100,000 examples and more).

Every generated case carries its truth, computed with exact fractions, so a property
can say "never credited" or "always credited" without trusting the verifier:

- a value written in any supported notation (fractions, decimals, thousands separators,
  percent, units, `x =`, Unicode digits) is credited against any other notation of it;
- a different value is never credited;
- appending a second, different candidate (any separator, Latin or CJK, in or out of
  the box) never turns 0 into 1; nor does any character of Unicode's punctuation and symbol
  categories standing between the two values (drawn from the categories, not from a list);
- a relation other than `=` never scores 1;
- the verdict is the same under whitespace, wrapper and padding changes;
- a percentage off by 100x is never credited; units convert within a dimension and never across;
- arbitrary text, including adversarial padding, is judged within the budget (no
  timeout, no exception);
- what stands around the final answer counts: a second value after it under a hedge, or a
  retraction of it, drawn from a grammar of phrasings written here (not from the verifier's own
  word lists), is never credited; an operator attached to the box changes the value; a tail that
  only explains or restates keeps the credit.
"""

from __future__ import annotations

import unicodedata
from fractions import Fraction

from hypothesis import strategies as st

from rlvr.records import Problem, RewardResult

# --- values and their notations ---------------------------------------------------------------

integers = st.integers(-(10**6), 10**6)
fractions = st.builds(Fraction, st.integers(-5000, 5000), st.integers(1, 64))
values = st.one_of(integers.map(Fraction), fractions)

UNITS = {  # dimension -> {unit as written: factor to the first}
    "length": {
        "m": Fraction(1),
        "cm": Fraction(1, 100),
        "mm": Fraction(1, 1000),
        "km": Fraction(1000),
        "\\text{ meters}": Fraction(1),
        "米": Fraction(1),
        "厘米": Fraction(1, 100),
    },
    "mass": {
        "g": Fraction(1),
        "kg": Fraction(1000),
        "mg": Fraction(1, 1000),
        "\\text{ grams}": Fraction(1),
        "克": Fraction(1),
        "千克": Fraction(1000),
    },
    "time": {
        "s": Fraction(1),
        "min": Fraction(60),
        "h": Fraction(3600),
        "\\text{ hours}": Fraction(3600),
        "秒": Fraction(1),
        "分钟": Fraction(60),
    },
    "area": {"\\text{ cm}^2": Fraction(1, 10000), "\\text{ m}^2": Fraction(1), "平方米": Fraction(1)},
}
SEPARATORS = [
    ", ",
    "; ",
    "、",
    "，",
    "；",
    " or ",
    " \\text{ or } ",
    " and ",
    "或",
    "和",
    " \\sim ",
    "~",
    "–",
    " \\text{ to } ",
    "至",
    "到",
    " \\lor ",
    " \\quad \\text{or} \\quad ",
]
RELATIONS = [
    "\\ne {v}",
    "\\neq {v}",
    "> {v}",
    "< {v}",
    "\\geq {v}",
    "\\leq {v}",
    "\\ge {v}",
    "\\le {v}",
    "≠ {v}",
    "≥ {v}",
    "≤ {v}",
    "x > {v}",
    "x \\neq {v}",
    "{v} < x",
    "\\text{not } {v}",
    "\\text{at least } {v}",
    "不等于{v}",
    "大于{v}",
    "不是{v}",
    "{v}以上",
    "\\lt {v}",
    "\\gt {v}",
    "\\not= {v}",
    "x \\in ({v}, \\infty)",
]
WRAPPERS = [
    "{x}",
    " {x} ",
    "{{{x}}}",
    "\\displaystyle {x}",
    "\\textbf{{{x}}}",
    "\\mathbf{{{x}}}",
    "\\text{{{x}}}",
    "  {x}\t",
    "\\color{{red}}{x}",
    "{x}\\phantom{{}}",
]
PADDING = [
    "",
    "Let me think step by step. ",
    "<think>1+1=2, 3*4=12</think>\n",
    "So,\n\n\n",
    "答案如下：",
    "We get $x^2$ and then $y$.\n",
    " " * 2000,
    "\n" * 500,
    "$a$ $b$ $c$ " * 50,
]
FULLWIDTH = str.maketrans("0123456789-.", "０１２３４５６７８９－．")


def _decimal(v: Fraction) -> str | None:
    """v as a terminating decimal, if it is one with at most 6 places."""
    for places in range(7):
        scaled = v * 10**places
        if scaled.denominator == 1:
            n = int(scaled)
            if places == 0:
                return str(n)
            sign, digits = ("-" if n < 0 else ""), str(abs(n)).rjust(places + 1, "0")
            return f"{sign}{digits[:-places]}.{digits[-places:]}"
    return None


def notations(v: Fraction) -> list[str]:
    """Ways to write exactly v (no units)."""
    out = [
        f"\\frac{{{v.numerator}}}{{{v.denominator}}}",
        f"{v.numerator}/{v.denominator}",
        f"\\dfrac{{{v.numerator}}}{{{v.denominator}}}",
    ]
    d = _decimal(v)
    if d is not None:
        out += [d, d.translate(FULLWIDTH), f"x = {d}", "−" + d[1:] if d.startswith("-") else d]
        if v.denominator == 1:
            n = int(v)
            out += [
                f"{n}.0",
                f"{n:,}",
                f"{n:,}".replace(",", "{,}"),
                f"{n:,}".replace(",", ",\\!"),
                f"\\frac{{{2 * n}}}{{2}}",
            ]
    if v < 0:
        out.append(f"-\\frac{{{-v.numerator}}}{{{v.denominator}}}")
    pct = _decimal(v * 100)
    if pct is not None:
        out.append(f"{pct}\\%")
    return out


@st.composite
def value_and_two_notations(draw, vals=values):
    v = draw(vals)
    forms = notations(v)
    return v, draw(st.sampled_from(forms)), draw(st.sampled_from(forms))


@st.composite
def two_values(draw):
    """Two values that differ by more than any tolerance (rel 1e-3)."""
    v, w = draw(values), draw(values)
    if abs(v - w) <= Fraction(1, 1000) * max(abs(v), abs(w), Fraction(1)):
        w = v + max(abs(v), Fraction(1))
    return v, w


@st.composite
def quantities(draw):
    """(dimension, value in the first unit, gold unit, pred unit)."""
    dim = draw(st.sampled_from(sorted(UNITS)))
    return (
        dim,
        draw(st.fractions(Fraction(1, 4), Fraction(10**4), max_denominator=8)),
        draw(st.sampled_from(sorted(UNITS[dim]))),
        draw(st.sampled_from(sorted(UNITS[dim]))),
    )


def number(v: Fraction) -> str:
    d = _decimal(v)
    return d if d is not None else f"\\frac{{{v.numerator}}}{{{v.denominator}}}"


def with_unit(v: Fraction, unit: str) -> str:
    return f"{number(v)}{unit}" if unit[0] in "\\" or ord(unit[0]) > 0x3000 else f"{number(v)} \\text{{ {unit}}}"


def boxed(answer: str, pad: str = "") -> str:
    return f"{pad}The final answer is $\\boxed{{{answer}}}$."


# --- judging ------------------------------------------------------------------------------------


def judge(verifier, gold: str, completion: str, prompt: str = "") -> RewardResult:
    return verifier.verify([Problem(id="f", prompt=prompt, answer=gold)], [completion])[0]


def credited(r: RewardResult) -> bool:
    return r.valid and r.components["correct"] == 1.0


def judged_in_budget(r: RewardResult) -> bool:
    return r.valid or not r.info.get("timeout")


# --- the properties (each returns a message when it fails, else None) ----------------------------


def same_value_any_notation(verifier, case) -> str | None:
    v, g, p = case
    r = judge(verifier, g, boxed(p))
    return None if credited(r) else f"value {v}: {p!r} not credited against gold {g!r}: {r.info} {r.error}"


def different_value_never(verifier, case) -> str | None:
    (v, w), gi, pi = case
    g, p = notations(v)[gi % len(notations(v))], notations(w)[pi % len(notations(w))]
    r = judge(verifier, g, boxed(p))
    return f"{p!r} ({w}) credited against gold {g!r} ({v})" if credited(r) else None


def second_candidate_never_helps(verifier, case) -> str | None:
    (v, w), sep, first, inside = case
    g, right, wrong = number(v), number(v), number(w)
    pair = f"{right}{sep}{wrong}" if first else f"{wrong}{sep}{right}"
    text = boxed(pair) if inside else f"{boxed(right)} {sep.strip() or 'or'} {boxed(wrong)}"
    r = judge(verifier, g, text)
    return f"{text!r} credited against gold {g!r}" if credited(r) else None


def _foreign(ch: str) -> bool:
    """Punctuation or a symbol that normalises to no ASCII character, letter, digit or space (NFKC
    folds fullwidth `＋` to `+`, an operator: not a separator)."""
    norm = unicodedata.normalize("NFKC", ch)
    return not any(c.isascii() or c.isalnum() or c.isspace() for c in norm)


UNICODE_SEPARATORS = st.lists(
    st.characters(categories=("Pd", "Po", "Pc", "Pi", "Pf", "Ps", "Pe", "Sm", "So", "Sk", "Sc")).filter(_foreign),
    min_size=1,
    max_size=2,
).map("".join)


def any_character_between_values_is_several(verifier, case) -> str | None:
    (v, w), sep, first, spaced = case
    if w in (0, 1, -1, v * v, v):
        return None  # an operator could join them into the gold (17∗1, 289⁄17): not a hedge
    pad = " " if spaced else ""
    right, wrong = number(v), number(w)
    pair = f"{right}{pad}{sep}{pad}{wrong}" if first else f"{wrong}{pad}{sep}{pad}{right}"
    r = judge(verifier, right, boxed(pair))
    return f"{pair!r} credited against gold {right!r}" if credited(r) else None


def relation_never(verifier, case) -> str | None:
    v, rel = case
    text = boxed(rel.replace("{v}", number(v)))
    r = judge(verifier, number(v), text)
    return f"{text!r} credited against gold {number(v)!r}" if credited(r) else None


def invariant_under_wrappers(verifier, case) -> str | None:
    (v, w), wrap, pad, right = case
    answer = number(v if right else w)
    plain, wrapped = (
        judge(verifier, number(v), boxed(answer)),
        judge(verifier, number(v), boxed(wrap.format(x=answer), pad)),
    )
    if credited(plain) != credited(wrapped) or credited(plain) != right:
        return f"{answer!r}: plain {credited(plain)}, wrapped {wrap!r} with padding {pad[:20]!r}: {credited(wrapped)}"
    return None


def percent_never_off_by_100(verifier, case) -> str | None:
    v, up = case
    if v == 0:
        return None
    g = f"{number(v)}\\%"
    p = f"{number(v * 100 if up else v / 100)}\\%"
    r = judge(verifier, g, boxed(p))
    return f"{p!r} credited against gold {g!r}" if credited(r) else None


def units_convert_within_a_dimension(verifier, case) -> str | None:
    (dim, v, gu, pu), other_dim, off = case
    factors = UNITS[dim]
    gold = with_unit(v / factors[gu], gu)
    pred_value = v / factors[pu] * (2 if off else 1)
    r = judge(verifier, gold, boxed(with_unit(pred_value, pu)))
    if credited(r) == off:
        return f"{with_unit(pred_value, pu)!r} against {gold!r}: credited={credited(r)} {r.info} {r.error}"
    if other_dim != dim:
        ou = sorted(UNITS[other_dim])[0]
        r = judge(verifier, gold, boxed(with_unit(v / factors[gu], ou)))
        if credited(r):
            return f"{with_unit(v / factors[gu], ou)!r} (another dimension) credited against {gold!r}"
    return None


def any_text_within_budget(verifier, case) -> str | None:
    text, gold = case
    r = judge(verifier, gold, text)
    return None if judged_in_budget(r) else f"over the budget: {text[:80]!r}: {r.error}"


JUNK = st.lists(
    st.sampled_from(
        list("0123456789{}()[]\\^_$,;.%-+*/= \n<>abcxyz")
        + [
            "\\boxed{",
            "\\frac",
            "<answer>",
            "</answer>",
            "Answer:",
            "####",
            "\\text{",
            "\\sqrt",
            "、",
            "或",
            "不",
            "≈",
            "\\pm",
            "km",
            "%",
            "1,000",
            "\\approx",
        ]
    ),
    max_size=200,
).map("".join)

# --- what stands around the final answer: a grammar of tails ---------------------------------
# Written independently of rlvr.rewards.context's cue lists: roles, each phrased several ways.

_ALTERNATIVE = ["or {w}", "or else {w}", "otherwise {w}", "alternatively {w}", "{w} is also possible", "or maybe {w}"]
_CONDITION = [
    "if the ends count it is {w}",
    "assuming order matters; otherwise {w}",
    "unless repetition is allowed, giving {w}",
    "provided zero is excluded, else {w}",
    "though with replacement it would be {w}",
    "but {w} when the last term counts",
]
_MODALITY = ["perhaps {w}", "it could be {w}", "it might be {w}", "possibly {w}", "probably {w} instead"]
_CORRECTION = ["actually {w}", "wait, it is {w}", "sorry, I meant {w}", "rather, {w}", "on second thought {w}"]
_RETRACTION = [
    "That is wrong.",
    "This answer is incorrect.",
    "No, that's not right.",
    "The answer is not {v}.",
    "It isn't {v}.",
    "No.",
    "I was wrong about that result.",
]
_ZH_HEDGE = [
    "或者{w}",
    "否则是{w}",
    "如果算上端点则是{w}",
    "也许是{w}",
    "可能是{w}",
    "其实是{w}",
    "应该是{w}",
    "要么是{w}",
]
_ZH_RETRACTION = ["不对。", "错了。", "答案不是{v}。", "这个结果不正确。"]
_JOINS = [", ", " (", "; ", ". ", " — ", "。", "，"]
HEDGED_TAILS = st.tuples(
    st.sampled_from(_JOINS), st.sampled_from(_ALTERNATIVE + _CONDITION + _MODALITY + _CORRECTION + _ZH_HEDGE)
)
RETRACTION_TAILS = st.sampled_from([". " + t for t in _RETRACTION] + ["。" + t for t in _ZH_RETRACTION])
BENIGN_TAILS = st.sampled_from(
    [
        ".",
        ". This completes the solution.",
        ". Check: $v - 1 + 1 = v$.",
        " ways in total.",
        ", as expected.",
        ". We are done.",
        "。验证完毕。",
        ". Note that the other root, {w}, is not allowed.",
    ]
)
ATTACHED = st.sampled_from(
    [("-", ""), ("", "^{2}"), ("", "!"), ("2", ""), ("\\sqrt{", "}"), ("", " \\times 3"), ("\\frac{", "}{2}")]
)


def _tail(template: str, v: Fraction, w: Fraction) -> str:
    return template.replace("{v}", number(v)).replace("{w}", number(w))


def hedged_tail_never_credited(verifier, case) -> str | None:
    (v, w), (join, template) = case
    text = f"The final answer is $\\boxed{{{number(v)}}}$" + join + _tail(template, v, w)
    r = judge(verifier, number(v), text)
    return f"{text!r} credited against gold {number(v)!r}" if credited(r) else None


def retracted_answer_never_credited(verifier, case) -> str | None:
    v, template = case
    text = f"The final answer is $\\boxed{{{number(v)}}}$" + _tail(template, v, v)
    r = judge(verifier, number(v), text)
    return f"{text!r} credited against gold {number(v)!r}" if credited(r) else None


def benign_tail_keeps_credit(verifier, case) -> str | None:
    (v, w), template = case
    text = f"The final answer is $\\boxed{{{number(v)}}}$" + _tail(template, v, w)
    r = judge(verifier, number(v), text)
    return None if credited(r) else f"{text!r} not credited against gold {number(v)!r}: {r.info} {r.error}"


def attached_operator_changes_the_value(verifier, case) -> str | None:
    n, (before, after) = case
    text = f"So $x = {before}\\boxed{{{n}}}{after}$."
    r = judge(verifier, str(n), text)
    return f"{text!r} credited against gold {n}" if credited(r) else None


PROPERTIES = {
    "same_value_any_notation": (same_value_any_notation, value_and_two_notations()),
    "different_value_never": (different_value_never, st.tuples(two_values(), st.integers(0, 20), st.integers(0, 20))),
    "second_candidate_never_helps": (
        second_candidate_never_helps,
        st.tuples(two_values(), st.sampled_from(SEPARATORS), st.booleans(), st.booleans()),
    ),
    "any_character_between_values_is_several": (
        any_character_between_values_is_several,
        st.tuples(st.tuples(st.integers(2, 10**6), integers), UNICODE_SEPARATORS, st.booleans(), st.booleans()),
    ),
    "relation_never": (relation_never, st.tuples(values, st.sampled_from(RELATIONS))),
    "invariant_under_wrappers": (
        invariant_under_wrappers,
        st.tuples(two_values(), st.sampled_from(WRAPPERS), st.sampled_from(PADDING), st.booleans()),
    ),
    "percent_never_off_by_100": (percent_never_off_by_100, st.tuples(values, st.booleans())),
    "units_convert_within_a_dimension": (
        units_convert_within_a_dimension,
        st.tuples(quantities(), st.sampled_from(sorted(UNITS)), st.booleans()),
    ),
    "any_text_within_budget": (
        any_text_within_budget,
        st.tuples(
            st.one_of(JUNK, st.builds(lambda j, n: j * n, JUNK, st.integers(1, 300))),
            st.sampled_from(["12", "\\frac{1}{2}", "x^2", "2 \\text{ km}", "20\\%"]),
        ),
    ),
    "hedged_tail_never_credited": (hedged_tail_never_credited, st.tuples(two_values(), HEDGED_TAILS)),
    "retracted_answer_never_credited": (retracted_answer_never_credited, st.tuples(values, RETRACTION_TAILS)),
    "benign_tail_keeps_credit": (benign_tail_keeps_credit, st.tuples(two_values(), BENIGN_TAILS)),
    "attached_operator_changes_the_value": (
        attached_operator_changes_the_value,
        st.tuples(st.integers(3, 10**4), ATTACHED),
    ),
}
