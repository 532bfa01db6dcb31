"""Cold start on a user's own data: worked solutions in data files, SFT on exactly the turn RL samples."""

from __future__ import annotations

import json

import pytest

from rlvr.assembly import run_task
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.models.tiny import build_tiny_model, build_tokenizer
from rlvr.rollout import build_engine
from rlvr.rollout.engine import SamplingParams
from rlvr.tasks.files import DataError, as_chat, load_problems
from rlvr.train.sft import sft_pairs

# A chat template over the tiny tokenizer's characters: a turn is "role: content<|eos|>\n".
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}<|eos|>\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
# 1-digit sums (OPS_TINY's task): a few seconds of SFT, one RL step
RUN = [
    "model.tiny_hidden=32",
    "model.tiny_layers=2",
    "model.tiny_heads=2",
    "sft.steps=60",
    "sft.batch_size=16",
    "sft.lr=1e-2",
    "rollout.batch_size=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=32",
    "train.steps=1",
    "eval.every=0",
    "train.threads=1",
    "run.progress=false",
    "log.tensorboard=false",
    "log.report=false",
    "data.chat=false",
    "data.eval_size=8",
]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_chat_record_ending_with_an_assistant_turn_carries_its_solution(tmp_path):
    msgs = [{"role": "user", "content": "1+2="}, {"role": "assistant", "content": "<answer>3</answer>"}]
    rows = [
        {"messages": msgs, "answer": "3"},
        {"prompt": "2+2=", "answer": "4", "solution": "<answer>4</answer>"},
        {"prompt": "3+3=", "answer": "6"},
    ]
    a, b, c = load_problems([_write(tmp_path / "d.jsonl", rows)])
    assert a.prompt == msgs[:1] and a.solution == "<answer>3</answer>"
    assert b.solution == "<answer>4</answer>" and c.solution is None
    both = [{"messages": msgs, "answer": "3", "solution": "x"}]
    with pytest.raises(DataError, match=r"d2.jsonl:1: a worked solution twice"):
        load_problems([_write(tmp_path / "d2.jsonl", both)])
    only = [{"messages": [{"role": "assistant", "content": "3"}], "answer": "3"}]
    with pytest.raises(DataError, match="no non-empty user message"):
        load_problems([_write(tmp_path / "d3.jsonl", only)])


@pytest.mark.parametrize("engine", ["hf", "loop"])
def test_sft_prompts_tokenise_exactly_as_rollout_feeds_them(tmp_path, engine):
    tok = build_tokenizer(code_chars=True)
    tok.chat_template = TEMPLATE
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2)
    rows = [
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "1+2="},
                {"role": "assistant", "content": "<answer>3</answer>"},
            ],
            "answer": "3",
        },
        {"prompt": "2+2=", "answer": "4", "solution": "<answer>4</answer>"},
    ]
    problems = as_chat(load_problems([_write(tmp_path / "d.jsonl", rows)]), None)  # data.chat=true
    cfg = load_config(None, [])
    sampled = build_engine(cfg.rollout, model, tok, name=engine).generate(
        problems, SamplingParams(group_size=1, max_new_tokens=2, greedy=True)
    )
    pairs = sft_pairs(problems, tok, [p.solution for p in problems])
    for p, c, (prompt, target, mask) in zip(problems, sampled, pairs):
        assert prompt == c.prompt_ids  # the very ids rollout conditions on
        # the demonstration is the assistant turn as the template writes it, ending with its end of turn
        whole = tok.apply_chat_template(
            [*p.prompt, {"role": "assistant", "content": p.solution}], tokenize=True, return_dict=False
        )
        assert prompt + target == list(whole)[: len(prompt) + len(target)]
        assert target[-1] == tok.eos_token_id and mask == [1] * len(target)


def test_sft_on_data_then_rl_from_it(tmp_path, capsys):
    rows = [
        {
            "id": f"r{a}{b}",
            "prompt": f"{a}+{b}=",
            "answer": str(a + b),
            **({"solution": f"<think>{a}+{b}={a + b}</think><answer>{a + b}</answer>"} if (a + b) % 5 else {}),
        }
        for a in range(10)
        for b in range(10)
    ]
    data = _write(tmp_path / "sums.jsonl", rows)
    common = [*RUN, f"sft.cache_dir={tmp_path / 'cache'}", f"run.dir={tmp_path / 'run'}"]
    assert main(["sft", "--data", str(data), *common]) == 0
    out = capsys.readouterr().out
    ckpt = tmp_path / "cache" / out.split("SFT checkpoint: ")[1].split()[0].rsplit("/", 1)[1]
    info = json.loads((ckpt / "sft.json").read_text())
    # 8 records held out; of the 92 trained on, those whose sum is a multiple of 5 carry no solution
    held = {p.id for p in run_task(load_config(None, [f"data.files=[{data}]", *common])).held_out()}
    no_solution = sum(1 for r in rows if "solution" not in r and r["id"] not in held)
    assert info["held_out"] == 8 and info["without_solution"] == no_solution and no_solution > 0
    assert info["examples"] == 92 - no_solution and f"{no_solution} training record(s) without one" in out
    assert info["final_loss"] < info["first_loss"] / 2  # it learned the demonstrations

    assert main(["train", f"data.files=[{data}]", *common]) == 0  # finds the cold start in the cache
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["start_from"] == str(ckpt) and summary["cold_start"]["examples"] == info["examples"]

    capsys.readouterr()  # the built-in teacher's key would have no effect here
    assert main(["sft", "--data", str(data), *common, "sft.teacher_error=0.1"]) == 2
    assert "config error: sft.teacher_error" in capsys.readouterr().err
