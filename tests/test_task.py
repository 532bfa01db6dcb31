import itertools
import random
import re

from rlvr.models.tiny import build_tokenizer
from rlvr.tasks.arithmetic import ArithmeticTask, teacher_solution


def _answer(solution: str) -> str:
    return re.search(r"<answer>(.*)</answer>", solution).group(1)


def test_held_out_never_in_training_stream():
    task = ArithmeticTask(min_digits=1, max_digits=2, eval_size=500)
    held = {p.prompt for p in task.held_out()}
    assert len(held) == 500
    train = [p.prompt for p in itertools.islice(task.train_stream(seed=0), 5000)]
    assert not held & set(train)


def test_worked_solutions_are_right_and_teacher_errors_are_wrong():
    task = ArithmeticTask(min_digits=1, max_digits=3, ops=("+", "-", "*"))
    rng = random.Random(0)
    carries = 0
    for p in itertools.islice(task.train_stream(seed=1), 300):
        assert _answer(p.metadata["solution"]) == p.answer == str(eval(p.prompt[:-1]))
        a, op, b = p.metadata["operands"]
        sloppy = _answer(teacher_solution(p, 1.0, rng))
        has_carry = op == "+" and any(int(x) + int(y) >= 10 for x, y in zip(str(a)[::-1], str(b)[::-1]))
        if has_carry:
            carries += 1
            assert sloppy != p.answer  # a forgotten carry always changes the result
        elif op == "+":
            assert sloppy == p.answer
    assert carries > 50


def test_tokenizer_round_trip_keeps_tags_whole():
    tok = build_tokenizer()
    text = "478+964=<think>8+4=12 7+6+1=14</think><answer>1442</answer>"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids) == text
    tokens = tok.convert_ids_to_tokens(ids)
    assert "<think>" in tokens and "</answer>" in tokens
    assert len(ids) == len(text) - sum(len(t) - 1 for t in ["<think>", "</think>", "<answer>", "</answer>"])
