"""The execution pool and verifier around the sandbox: invalid samples instead of stalls,
bounded concurrency, metrics, what enters the sandbox, refusal, and `rlvr sandbox`."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

import pytest

from rlvr.cli import main
from rlvr.records import Problem
from rlvr.config.code import CodeConfig
from rlvr.sandbox.executor import Interpreter, Sandbox
from rlvr.sandbox.isolation import plans_to_try

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox needs Linux namespaces")

ADD = {"type": "function", "entry_point": "add", "cases": [{"args": [1, 2], "expected": 3}]}
GOOD = "```python\ndef add(a, b):\n    return a + b\n```"


def problem(tests=ADD, pid="p"):
    return Problem(id=pid, prompt="", tests=tests, verifier="code")


# A uid range of this test process only, so scans never see another run's sandboxes.
UIDS = {"uid_base": 3_100_000_000 + (os.getpid() % 10_000) * 100_000, "uid_count": 100_000}


@pytest.fixture(scope="module")
def verifier():
    from rlvr.sandbox.verifier import CodeVerifier

    v = CodeVerifier(CodeConfig(case_timeout_s=1.0, timeout_s=2.0, grace_s=0.5, max_parallel=2, **UIDS))
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
    launcher = next(p for p in plans_to_try(real.cfg) if p.isolate and not p.server)  # runs the fake directly
    broken = {
        name: Sandbox(real.cfg, launcher, Interpreter(str(path), [], roots))
        for name, path in (("HANG", hang), ("CRASH", crash))
    }
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


def sandbox_uid_pids() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(ln for ln in f if ln.startswith("Uid:")).split()[1])
        except (OSError, StopIteration):
            continue
        if UIDS["uid_base"] <= uid < UIDS["uid_base"] + UIDS["uid_count"]:
            found.append(int(pid))
    return found


def test_frozen_supervisor_is_killed_with_its_namespace(verifier, monkeypatch):
    """The host's own deadline: the supervisor (pid 1) is stopped mid-run, so only the
    host can end the run; killing pid 1 must take the sleeping program with it."""
    if not verifier.sandbox.plan.server:
        pytest.skip("the fork server is used only when running as root")
    server = verifier.sandbox._server
    real_spawn = server.spawn

    def spawn_then_freeze(fds):
        pidfd = real_spawn(fds)
        threading.Timer(0.4, signal.pidfd_send_signal, (pidfd, signal.SIGSTOP)).start()
        return pidfd

    monkeypatch.setattr(server, "spawn", spawn_then_freeze)
    seen: set[int] = set()
    probe = threading.Timer(0.8, lambda: seen.update(sandbox_uid_pids()))
    probe.start()
    (r,) = verifier.verify([problem()], ["```python\nimport time\ntime.sleep(100)\n```"])
    probe.join()
    assert not r.valid and "did not finish" in r.error
    assert seen, "the program was running (as a sandbox uid) while the supervisor was frozen"
    assert sandbox_uid_pids() == []
    monkeypatch.undo()
    assert verifier.verify([problem()], [GOOD])[0].components["correct"] == 1.0


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
    import rlvr.sandbox.executor as executor

    sent = []
    real_encode = executor.encode_request
    monkeypatch.setattr(executor, "encode_request", lambda req: sent.append(req) or real_encode(req))
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


@pytest.mark.parametrize(
    "code, status",
    [
        ("import sys\nprint(sys.stdin.read().upper())\n", "ok"),
        ("while True:\n    pass\n", "timeout"),
        ("x = bytearray(1 << 30)\n", "memory"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "killed"),
        ("raise ValueError('bad')\n", "error"),
    ],
)
def test_cli_sandbox_run_prints_a_verdict(tmp_path, capsys, code, status):
    prog = tmp_path / "prog.py"
    prog.write_text(code)
    stdin = tmp_path / "in.txt"
    stdin.write_text("hello\n")
    rc = main(["sandbox", "run", str(prog), "reward.code.memory_mb=256", "--stdin", str(stdin), "--timeout", "1"])
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["status"] == status and rc == (0 if status == "ok" else 1)
    assert verdict["isolation"].startswith(("namespaces", "user_namespaces"))
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
    code = (
        "```python\nimport os, yaml\n"
        f"print(yaml.safe_load('a: 1')['a'], os.path.exists({repo_file!r}), os.getcwd())\n```"
    )
    tests = {"type": "stdio", "cases": [{"input": "", "output": "1 False /sandbox"}]}
    (r,) = verifier.verify([problem(tests)], [code])
    assert r.components["correct"] == 1.0, r.info


def test_unshare_launcher_gives_the_same_isolation(verifier):
    """The fallback when the fork server cannot run: `unshare` + a fresh interpreter per run."""
    cfg = verifier.sandbox.cfg
    plan = next(p for p in plans_to_try(cfg) if p.isolate and not p.server)
    sandbox = Sandbox(cfg, plan, verifier.sandbox.interpreter)
    try:
        daemon = (
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        time.sleep(100)\n    os._exit(0)\nprint(open('/proc/net/dev').read().count(':'), os.getuid() != 0)\n"
        )
        run = sandbox.execute("program", daemon, [{"stdin": ""}])
        assert run.ok and run.cases[0]["stdout"] == "1 True\n"  # only lo; not root
        run = sandbox.execute("program", "while True:\n    pass\n", [{"stdin": ""}])
        assert run.ok and run.cases[0]["status"] == "timeout"
        assert sandbox_uid_pids() == []
    finally:
        sandbox.close()
