"""The execution pool and verifier around the sandbox: invalid samples instead of stalls,
bounded concurrency, metrics, what enters the sandbox, refusal, and `rlvr sandbox`."""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest

from rlvr.cli import main
from rlvr.records import Problem
from rlvr.sandbox.config import CodeConfig
from rlvr.sandbox.executor import Interpreter, Sandbox

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox needs Linux namespaces")

ADD = {"type": "function", "entry_point": "add", "cases": [{"args": [1, 2], "expected": 3}]}
GOOD = "```python\ndef add(a, b):\n    return a + b\n```"


def problem(tests=ADD, pid="p"):
    return Problem(id=pid, prompt="", tests=tests, verifier="code")


@pytest.fixture(scope="module")
def verifier():
    from rlvr.sandbox.verifier import CodeVerifier
    v = CodeVerifier(CodeConfig(case_timeout_s=1.0, timeout_s=2.0, grace_s=0.5, max_parallel=2))
    yield v
    v.close()


def processes_with(needle: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_hung_or_crashed_sandbox_marks_the_sample_invalid_and_the_batch_goes_on(verifier, tmp_path, monkeypatch):
    hang = tmp_path / "hang.sh"
    hang.write_text("#!/bin/sh\nsleep 7.25\n")  # a 'harness' that never answers
    crash = tmp_path / "crash.sh"
    crash.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    for script in (hang, crash):
        script.chmod(0o755)
    real = verifier.sandbox
    roots = real.interpreter.roots + [str(tmp_path)]
    broken = {name: Sandbox(real.cfg, real.plan, Interpreter(str(path), [], roots))
              for name, path in (("HANG", hang), ("CRASH", crash))}
    real_execute = real.execute

    def execute(mode, source, cases, **kw):
        for name, sandbox in broken.items():
            if name in source:
                return sandbox.execute(mode, source, cases, **kw)
        if "RAISE" in source:
            raise OSError("simulated failure")
        return real_execute(mode, source, cases, **kw)

    monkeypatch.setattr(real, "execute", execute)
    texts = [GOOD.replace("a + b", f"a + b  # {tag}") for tag in ("HANG", "CRASH", "RAISE", "fine")]
    results = verifier.verify([problem(pid=str(i)) for i in range(4)], texts)
    assert [r.valid for r in results] == [False, False, False, True]
    assert "did not finish" in results[0].error and "boom" in results[1].error
    assert "simulated failure" in results[2].error
    assert results[3].components["correct"] == 1.0
    assert processes_with("7.25") == []  # the hung launcher and its child were killed
    assert verifier.metrics()["sandbox/invalid"] == 3


def test_concurrency_is_bounded_and_metrics_are_reported(verifier, monkeypatch):
    running, peak, lock = [0], [0], threading.Lock()
    real_execute = verifier.sandbox.execute

    def counting(*args, **kwargs):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            return real_execute(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(verifier.sandbox, "execute", counting)
    verifier.metrics()  # start a fresh window
    slow = "```python\nimport time\ndef add(a, b):\n    time.sleep(0.2)\n    return a + b\n```"
    texts = [slow.replace("0.2", f"0.2{i}") for i in range(5)] + ["```python\nwhile True: pass\n```", "no code"]
    results = verifier.verify([problem(pid=str(i)) for i in range(7)], texts)
    assert [r.components["correct"] for r in results] == [1.0] * 5 + [0.0, 0.0]
    assert peak[0] == 2
    m = verifier.metrics()
    assert m["sandbox/executions"] == 6 and m["sandbox/executions_per_s"] > 0
    assert m["sandbox/timeout_rate"] == pytest.approx(1 / 6)
    assert m["sandbox/fail/no_code"] == 1 and m["sandbox/fail/wall_timeout"] + m.get("sandbox/fail/cpu_limit", 0) == 1


def test_identical_completions_run_once(verifier):
    verifier.metrics()
    results = verifier.verify([problem()] * 4, [GOOD] * 4)
    assert [r.components["correct"] for r in results] == [1.0] * 4
    assert verifier.metrics()["sandbox/executions"] == 1


def test_expected_values_never_reach_the_sandbox(verifier, monkeypatch):
    sent = []
    real_launch = verifier.sandbox._launch
    monkeypatch.setattr(verifier.sandbox, "_launch", lambda argv, req, *a: sent.append(req) or real_launch(argv, req, *a))
    tests = {"type": "function", "entry_point": "add", "cases": [{"args": [1, 2], "expected": "EXPECTED-7f3a"}]}
    stdio = {"type": "stdio", "cases": [{"input": "1 2\n", "output": "OUTPUT-91bc"}]}
    verifier.verify([problem(tests, "a"), problem(stdio, "b")], [GOOD, "```python\nprint(3)\n```"])
    assert len(sent) == 2 and all("EXPECTED-7f3a" not in repr(r) and "OUTPUT-91bc" not in repr(r) for r in sent)


def test_all_or_nothing_stops_at_the_first_failure():
    from rlvr.sandbox.verifier import CodeVerifier
    v = CodeVerifier(CodeConfig(case_timeout_s=1.0, scoring="all_or_nothing"))
    try:
        tests = {"type": "stdio", "cases": [{"input": str(i), "output": str(i)} for i in range(4)]}
        code = "```python\nx = int(input())\nassert x != 1\nprint(x)\n```"
        (r,) = v.verify([problem(tests)], [code])
        assert r.components["correct"] == 0.0 and r.info["failures"] == {"exit_code": 1, "not_run": 2}
        (r,) = v.verify([problem(tests)], ["```python\nprint(input())\n```"])
        assert r.components["correct"] == 1.0
    finally:
        v.close()


def test_refuses_without_required_isolation():
    from rlvr.sandbox.verifier import CodeVerifier, SandboxUnavailable
    with pytest.raises(SandboxUnavailable) as err:
        CodeVerifier(CodeConfig(isolation="none"))
    assert "network isolation is not active" in str(err.value) and "to fix" in str(err.value)


@pytest.mark.parametrize("code, status", [
    ("import sys\nprint(sys.stdin.read().upper())\n", "ok"),
    ("while True:\n    pass\n", "timeout"),
    ("x = bytearray(1 << 30)\n", "memory"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "killed"),
    ("raise ValueError('bad')\n", "error"),
])
def test_cli_sandbox_run_prints_a_verdict(tmp_path, capsys, code, status):
    prog = tmp_path / "prog.py"
    prog.write_text(code)
    stdin = tmp_path / "in.txt"
    stdin.write_text("hello\n")
    rc = main(["sandbox", "run", str(prog), "reward.code.memory_mb=256", "--stdin", str(stdin), "--timeout", "1"])
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["status"] == status and rc == (0 if status == "ok" else 1)
    assert verdict["isolation"] in ("namespaces", "user_namespaces")
    if status == "ok":
        assert verdict["stdout"] == "HELLO\n\n" and verdict["exit_code"] == 0


def test_cli_sandbox_check(capsys):
    assert main(["sandbox", "check"]) == 0
    out = capsys.readouterr().out
    assert "all required protections active" in out and "network" in out and "limits" in out
    assert main(["sandbox", "check", "reward.code.isolation=none"]) == 1
    assert "MISSING" in capsys.readouterr().out


def test_program_sees_site_packages_but_not_the_repository(verifier, tmp_path):
    import rlvr
    repo_file = os.path.abspath(rlvr.__file__)
    code = ("```python\nimport os, yaml\n"
            f"print(yaml.safe_load('a: 1')['a'], os.path.exists({repo_file!r}), os.getcwd())\n```")
    tests = {"type": "stdio", "cases": [{"input": "", "output": "1 False /sandbox"}]}
    (r,) = verifier.verify([problem(tests)], [code])
    assert r.components["correct"] == 1.0, r.info
