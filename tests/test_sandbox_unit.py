"""Pure parts of the code sandbox: extraction, test formats, judging, the isolation report."""

from __future__ import annotations

import os

import pytest

from rlvr.config import load_config
from rlvr.configlib import ConfigError
from rlvr.sandbox.cases import TestFormatError, judge, normalize_output, parse_tests, same_value, sandbox_cases
from rlvr.config.code import CodeConfig
from rlvr.sandbox.executor import Execution
from rlvr.sandbox.extract import extract_code
from rlvr.sandbox.isolation import IsolationPlan, build_report


def test_extract_last_python_block_by_default():
    text = "```python\nprint(1)\n```\nthen\n```\nuntagged\n```\n```py\nprint(2)\n```\n```text\nno\n```"
    assert extract_code(text) == "print(2)\n"
    assert extract_code(text, "last_block") == "no\n"
    assert extract_code(text, "whole_text") == text
    assert extract_code("no code here") is None
    assert extract_code("```python\nprint(1)\n") is None  # cut off before the closing fence
    assert extract_code("```python\n   \n```") is None
    assert extract_code("  ```python\n  x = 1\n  ```") == "  x = 1\n"
    with pytest.raises(ValueError):
        extract_code("x", "first")


@pytest.mark.parametrize(
    "tests, message",
    [
        (None, "expected a mapping"),
        ({"type": "shell"}, "tests.type"),
        ({"type": "stdio"}, "tests.cases"),
        ({"type": "stdio", "cases": [{"input": "1"}]}, "tests.cases[0]"),
        ({"type": "stdio", "cases": [{"input": 1, "output": "1"}]}, "must be strings"),
        ({"type": "function", "cases": [{"expected": 1}]}, "tests.entry_point"),
        ({"type": "function", "entry_point": "f", "cases": [{"args": 1, "expected": 1}]}, "args"),
        ({"type": "assert", "entry_point": "f", "test": "assert True"}, "check(candidate)"),
        ({"type": "function", "entry_point": "f", "cases": [{"expected": 1}], "rel_tol": -1}, "rel_tol"),
    ],
)
def test_malformed_tests_name_the_key(tests, message):
    with pytest.raises(TestFormatError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        parse_tests(tests)


def test_only_inputs_go_to_the_sandbox():
    spec = parse_tests(
        {"type": "function", "entry_point": "f", "cases": [{"args": [1], "kwargs": {"k": 2}, "expected": "SECRET"}]}
    )
    assert sandbox_cases(spec) == [{"args": [1], "kwargs": {"k": 2}}]
    spec = parse_tests({"type": "stdio", "cases": [{"input": "x", "output": "SECRET"}]})
    assert sandbox_cases(spec) == [{"stdin": "x"}]


def test_output_normalisation_and_value_equality():
    assert normalize_output("3  \r\n4\t\n\n\n") == normalize_output("3\n4")
    assert normalize_output(" 3") != normalize_output("3")  # leading whitespace counts
    assert same_value([1, {"a": 2.0}], [1, {"a": 2}], 1e-9)
    assert same_value(0.1 + 0.2, 0.3, 1e-9) and not same_value(0.1 + 0.2, 0.3, 0.0)
    assert not same_value(True, 1, 1e-9) and not same_value(1, True, 1e-9)
    assert not same_value([1, 2], [1, 2, 3], 1e-9) and not same_value("1", 1, 1e-9)
    assert not same_value(float("nan"), float("nan"), 1e-9)


def _run(nonce: str, cases: list[dict]) -> Execution:
    return Execution(True, cases, nonce)


def test_judge_believes_only_lines_with_the_nonce():
    spec = parse_tests({"type": "function", "entry_point": "f", "cases": [{"args": [], "expected": 3}] * 4})
    ok = {"status": "ok", "reason": ""}
    run = _run(
        "n0nce",
        [
            dict(ok, result='n0nce 0 {"value": 3}'),
            dict(ok, result='other 1 {"value": 3}'),
            dict(ok, result='n0nce 0 {"value": 3}'),
            dict(ok, result='n0nce 3 {"error": "E"}'),
        ],
    )
    assert [(v.passed, v.reason) for v in judge(spec, run)] == [
        (True, ""),
        (False, "no_result"),
        (False, "no_result"),
        (False, "exception"),
    ]
    spec = parse_tests({"type": "assert", "entry_point": "f", "test": "def check(candidate): pass"})
    assert judge(spec, _run("k", [dict(ok, result='k 0 {"passed": true}')]))[0].passed
    assert not judge(spec, _run("k", [dict(ok, result='k 0 {"passed": 1}')]))[0].passed
    assert not judge(spec, _run("k", [dict(ok, result=None)]))[0].passed


def test_judge_stdio_needs_clean_exit_and_full_output():
    spec = parse_tests({"type": "stdio", "cases": [{"input": "", "output": "3"}] * 3})
    run = _run(
        "n",
        [
            {"status": "ok", "reason": "", "stdout": "3\n", "truncated": False},
            {"status": "error", "reason": "exit_code", "stdout": "3\n", "truncated": False},
            {"status": "ok", "reason": "", "stdout": "3", "truncated": True},
        ],
    )
    assert [(v.passed, v.reason) for v in judge(spec, run)] == [
        (True, ""),
        (False, "exit_code"),
        (False, "output_limit"),
    ]


def test_config_is_validated_with_the_key():
    assert load_config(overrides=["reward.code.max_parallel=4"]).reward.code.max_parallel == 4
    with pytest.raises(ConfigError, match="reward.code.scoring"):
        load_config(overrides=["reward.code.scoring=some"])
    with pytest.raises(ConfigError, match="reward.code"):
        load_config(overrides=["reward.code.max_parallel=0"])
    with pytest.raises(ValueError):
        CodeConfig(uid_base=4_294_967_000)


def _facts(**over) -> dict:
    ns = {name: os.readlink(f"/proc/self/ns/{name}") for name in ("net", "mnt", "pid", "ipc", "uts")}
    facts = {f"ns_{k}": v + "-other" for k, v in ns.items()}
    facts.update(
        uid=2_000_000_001,
        gid=2_000_000_001,
        env=["HOME", "LANG", "PATH"],
        cap_eff="0000000000000000",
        interfaces=["lo"],
        loopback="Network is unreachable",
        processes=2,
        host_marker_visible=False,
        seccomp="2",
        writes={"/probe": "Read-only file system", "/sandbox/probe": "ok"},
        limits={
            k: [1, 1]
            for k in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_CORE")
        },
    )
    facts.update(over)
    return facts


@pytest.mark.skipif(not os.path.exists("/proc/self/ns/net"), reason="Linux only")
def test_report_is_built_from_what_the_probe_saw():
    plan = IsolationPlan("namespaces", ["unshare"], True, True)
    good = build_report(CodeConfig(), plan, ["/usr"], True, _facts(), None, [])
    assert good.meets_requirements and "MISSING" not in good.text()
    unfiltered = build_report(CodeConfig(), plan, ["/usr"], True, _facts(seccomp="0"), None, [])
    assert not unfiltered.meets_requirements  # the filter asked for (reward.code.seccomp) is required...
    assert "syscalls     MISSING" in unfiltered.text() and "reward.code.seccomp=false" in unfiltered.text()
    unasked = build_report(CodeConfig(seccomp=False), plan, ["/usr"], True, _facts(seccomp="0"), None, [])
    assert unasked.meets_requirements and "syscalls     MISSING" in unasked.text()  # ...unless turned off, shown
    net = os.readlink("/proc/self/ns/net")
    leaky = build_report(CodeConfig(), plan, ["/usr"], True, _facts(ns_net=net, interfaces=["lo", "eth0"]), None, [])
    assert not leaky.meets_requirements
    assert "network isolation is not active" in leaky.text() and "refused" in leaky.text()
    visible = build_report(CodeConfig(), plan, ["/usr"], True, _facts(host_marker_visible=True), None, [])
    assert not visible.meets_requirements and "filesystem" in "".join(visible.missing)
    as_root = build_report(CodeConfig(), plan, ["/usr"], True, _facts(uid=0), None, [])
    assert "NOT enforced" in as_root.protections["limits"][1]
    failed = build_report(CodeConfig(require_isolation=False), plan, [], True, None, "mount: EPERM", [])
    assert not failed.meets_requirements and "--cap-add SYS_ADMIN" in failed.text()
    assert "running anyway" in failed.text()
