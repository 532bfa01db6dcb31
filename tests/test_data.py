"""Data files: JSONL, Parquet and datasets directories; validation naming FILE:LINE; skip policy;
mixing by source ratio with the run's seed; held-out split; prompt-length policy."""

import itertools
import json
from collections import Counter

import pytest

from rlvr.assembly import run_task
from rlvr.config import load_config
from rlvr.configlib import ConfigError
from rlvr.models.tiny import build_tokenizer
from rlvr.tasks import ProblemSampler
from rlvr.tasks.files import DataError, load_problems

CHAT = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def math_rows(n, source=None):
    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(n)]
    if source:
        for r in rows:
            r["source"] = source
    return rows


def test_jsonl_records_become_problems(tmp_path):
    f = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            {"prompt": "2+2=", "answer": 4},
            {
                "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "3*3?"}],
                "answer": "9",
                "source": "chat",
                "id": "q2",
            },
            {
                "prompt": "write add",
                "tests": {"type": "function", "entry_point": "add", "cases": [{"args": [1, 2], "expected": 3}]},
            },
            {
                "prompt": "echo",
                "tests": json.dumps({"type": "stdio", "cases": [{"input": "a", "output": "a"}]}),
                "verifier": "code",
                "metadata": {"level": 1},
            },
        ],
    )
    ps = load_problems([f])
    assert [p.answer for p in ps] == ["4", "9", None, None]
    assert [p.verifier for p in ps] == ["math", "math", "code", "code"]
    assert [p.source for p in ps] == ["mixed", "chat", "mixed", "mixed"]
    assert ps[1].id == "q2" and ps[0].id == f"{f}:1"
    assert ps[1].prompt[0] == {"role": "system", "content": "be brief"}
    assert ps[3].tests["type"] == "stdio" and ps[3].metadata["level"] == 1
    assert ps[3].metadata["where"] == f"{f}:4"


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"prompt": "1+1=", "answer": "2"', "not valid JSON"),
        ('["prompt", "answer"]', "expected a JSON object, got list"),
        ('{"prompt": "1+1="}', "missing field 'answer'"),
        ('{"answer": "2"}', "needs exactly one of 'prompt' (text) or 'messages' (chat), got neither"),
        ('{"prompt": ["1+1="], "answer": "2"}', "field 'prompt': expected text, got list"),
        ('{"prompt": "1+1=", "answer": [2]}', "field 'answer': expected text or a number, got list"),
        ('{"prompt": "1+1=", "answer": true}', "field 'answer': expected text or a number, got bool"),
        ('{"prompt": "  ", "answer": "2"}', "field 'prompt' is empty"),
        ('{"messages": [{"role": "bot", "content": "hi"}], "answer": "2"}', "messages[0].role"),
        (
            '{"messages": [{"role": "user", "content": 3}], "answer": "2"}',
            "messages[0].content': expected text, got int",
        ),
        ('{"prompt": "x", "answer": "2", "verifier": "chem"}', "unknown verifier 'chem'"),
        ('{"prompt": "x", "answer": "2", "verifier": "code"}', "missing field 'tests' (verifier 'code')"),
        ('{"prompt": "x", "tests": {"type": "stdio"}}', "tests.cases"),
        ('{"prompt": "x", "answer": "2", "source": 7}', "field 'source': expected text, got int"),
        ('{"prompt": "1+1=", "answer": "2", "id": "line1"}', "duplicate id 'line1'"),
    ],
)
def test_a_bad_record_is_reported_with_file_and_line(tmp_path, line, message):
    f = write_jsonl(tmp_path / "d.jsonl", ['{"prompt": "0+0=", "answer": "0", "id": "line1"}', "", line])
    with pytest.raises(DataError) as err:
        load_problems([f])
    assert str(err.value).startswith(f"{f}:3: ")  # the blank line 2 still counts
    assert message in str(err.value)


def test_skip_policy_counts_and_logs_every_bad_line(tmp_path, caplog):
    f = write_jsonl(tmp_path / "d.jsonl", math_rows(3) + ["{oops", {"prompt": "x"}] + math_rows(2))
    events = []
    ps = load_problems([f], "skip", lambda kind, **fields: events.append((kind, fields)))
    assert len(ps) == 5
    assert [(k, e["where"]) for k, e in events] == [("skipped_record", f"{f}:4"), ("skipped_record", f"{f}:5")]
    assert "not valid JSON" in events[0][1]["reason"] and "missing field 'answer'" in events[1][1]["reason"]
    assert f"skipped {f}:4" in caplog.text and "skipped 2 bad record(s) of 7" in caplog.text


def test_parquet_rows_and_errors_name_the_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"prompt": ["1+1=", "2+2=", "3+3="], "answer": ["2", None, "6"], "source": ["a", "a", "b"]})
    pq.write_table(table, tmp_path / "d.parquet")
    with pytest.raises(DataError, match=r"d\.parquet: row 2: missing field 'answer'"):
        load_problems([tmp_path / "d.parquet"])
    ps = load_problems([tmp_path / "d.parquet"], "skip")
    assert [(p.prompt, p.answer, p.source) for p in ps] == [("1+1=", "2", "a"), ("3+3=", "6", "b")]


def test_datasets_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"messages": [{"role": "user", "content": f"{i}+1?"}], "answer": str(i + 1)} for i in range(4)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    ps = load_problems([tmp_path / "ds"])
    assert [p.answer for p in ps] == ["1", "2", "3", "4"] and ps[0].prompt == rows[0]["messages"]
    assert ps[0].source == "ds" and ps[0].metadata["where"] == f"{tmp_path / 'ds'}: row 1"


def _cfg(tmp_path, *overrides):
    return load_config(None, [f"run.dir={tmp_path / 'run'}", *overrides])


def test_mix_ratio_is_exact_seeded_and_held_out_is_disjoint(tmp_path):
    write_jsonl(tmp_path / "math.jsonl", math_rows(60))
    write_jsonl(
        tmp_path / "code.jsonl",
        [
            {"prompt": f"f{i}", "tests": {"type": "stdio", "cases": [{"input": "", "output": str(i)}]}}
            for i in range(20)
        ],
    )
    files = f"data.files=[{tmp_path / 'math.jsonl'},{tmp_path / 'code.jsonl'}]"
    cfg = _cfg(tmp_path, files, "data.mix={math: 6, code: 4}", "data.eval_size=8")
    task = run_task(cfg)
    held = task.held_out()
    assert Counter(p.source for p in held) == {"math": 6, "code": 2}  # per source in proportion (60:20)
    draws = list(itertools.islice(task.train_stream(cfg.seed), 100))
    assert Counter(p.source for p in draws[:10]) == {"math": 6, "code": 4}  # every window keeps the ratio
    assert Counter(p.source for p in draws) == {"math": 60, "code": 40}
    assert not {p.id for p in held} & {p.id for p in draws}
    assert len({p.id for p in draws if p.source == "code"}) == 18  # all training code records before repeats
    again = [p.id for p in itertools.islice(run_task(cfg).train_stream(cfg.seed), 100)]
    assert again == [p.id for p in draws]  # a pure function of the seed
    other = [
        p.id
        for p in itertools.islice(
            run_task(_cfg(tmp_path, files, "seed=1", "data.mix={math: 6, code: 4}", "data.eval_size=8")).train_stream(
                1
            ),
            100,
        )
    ]
    assert other != again
    # a resumed sampler replays to its position
    s = ProblemSampler(task, seed=cfg.seed)
    s.take(7)
    assert [p.id for p in ProblemSampler(task, seed=cfg.seed, position=7).take(5)] == [p.id for p in s.take(5)]


def test_mix_must_name_the_sources(tmp_path):
    write_jsonl(tmp_path / "math.jsonl", math_rows(10))
    cfg = _cfg(tmp_path, f"task.name={tmp_path / 'math.jsonl'}", "data.mix={maths: 1}", "data.eval_size=2")
    with pytest.raises(DataError, match=r"unknown source\(s\) \['maths'\].*no share for source\(s\) \['math'\]"):
        run_task(cfg)
    with pytest.raises(ConfigError, match="task.name: 'nope.jsonl' is neither a built-in task"):
        run_task(_cfg(tmp_path, "task.name=nope.jsonl"))


def test_chat_wrapping_system_prompt_and_prompt_length_policies(tmp_path):
    long_q = "What is " + "1+" * 60 + "1?"
    write_jsonl(tmp_path / "d.jsonl", math_rows(6) + [{"prompt": long_q, "answer": "61", "id": "long"}])
    tok = build_tokenizer()
    tok.chat_template = CHAT
    base = [
        f"task.name={tmp_path / 'd.jsonl'}",
        "data.eval_size=1",
        "data.system_prompt=Box it.",
        "data.max_prompt_tokens=64",
    ]
    with pytest.raises(
        DataError, match=r"(?s)d\.jsonl:7: prompt is 1\d\d tokens.*data.on_long_prompt=skip or truncate"
    ):
        run_task(_cfg(tmp_path, *base), tokenizer=tok)
    # the model's context binds below data.max_prompt_tokens: a prompt must leave a position to answer in
    roomy = [*base[:-1], "data.max_prompt_tokens=4096"]
    with pytest.raises(DataError, match=r"longer than the model's context \(64 positions, one left to answer in\)"):
        run_task(_cfg(tmp_path, *roomy), tokenizer=tok, context=64)
    assert len(run_task(_cfg(tmp_path, *roomy), tokenizer=tok, context=4097).all_problems()) == 7
    events = []
    task = run_task(
        _cfg(tmp_path, *base, "data.on_long_prompt=skip"),
        tokenizer=tok,
        on_event=lambda kind, **f: events.append((kind, f)),
    )
    assert "long" not in {p.id for p in task.all_problems()} and len(task.all_problems()) == 6
    assert [k for k, _ in events] == ["prompt_skipped", "data_loaded"] and events[0][1]["limit"] == 64
    events.clear()
    task = run_task(
        _cfg(tmp_path, *base, "data.on_long_prompt=truncate"),
        tokenizer=tok,
        on_event=lambda kind, **f: events.append((kind, f)),
    )
    cut = next(p for p in task.all_problems() if p.id == "long")
    assert cut.prompt[0] == {"role": "system", "content": "Box it."}  # the system prompt goes first
    assert long_q.endswith(cut.prompt[-1]["content"]) and cut.prompt[-1]["content"].endswith("+1?")
    rendered = tok.apply_chat_template(cut.prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert 60 <= len(rendered) <= 64 and events[0][0] == "prompt_truncated"
    # plain text prompts stay text with data.chat=false; a tokenizer without a template is refused for chat
    plain = run_task(_cfg(tmp_path, f"task.name={tmp_path / 'd.jsonl'}", "data.eval_size=1", "data.chat=false"))
    assert all(isinstance(p.prompt, str) for p in plain.all_problems())
    with pytest.raises(DataError, match="no chat template"):
        run_task(_cfg(tmp_path, f"task.name={tmp_path / 'd.jsonl'}", "data.eval_size=1"), tokenizer=build_tokenizer())


def test_eval_n_above_the_records_held_out_is_a_config_error(tmp_path):
    """eval.n set above data.eval_size would be capped without a word: refused, naming both keys;
    left at its default it is the records held out."""
    f = write_jsonl(tmp_path / "d.jsonl", math_rows(10))
    with pytest.raises(ConfigError, match="eval.n: 8 held-out problems asked for, but data.eval_size holds out 3"):
        run_task(load_config(None, [f"task.name={f}", "data.eval_size=3", "eval.n=8"]))
    assert len(run_task(load_config(None, [f"task.name={f}", "data.eval_size=3"])).held_out()) == 3
