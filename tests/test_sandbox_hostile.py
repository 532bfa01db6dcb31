"""Hostile programs against the real sandbox: each scores 0 (or its true score), the
host is untouched, no process of the run survives it, and the next run works.

Limits are small (1 s per case, 256 MiB, 32 processes) so the bombs stay cheap on a
shared 2-core machine. The only network address used is a listener this file opens
on 127.0.0.1.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time

import pytest

from rlvr.records import Problem
from rlvr.config.code import CodeConfig

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox needs Linux namespaces")

# A uid range of this test process only, so the leftover scan never sees another run's sandboxes.
UIDS = {"uid_base": 3_000_000_000 + (os.getpid() % 10_000) * 100_000, "uid_count": 100_000}
CFG = CodeConfig(
    case_timeout_s=1.0,
    timeout_s=6.0,
    memory_mb=256,
    max_processes=32,
    max_file_mb=8,
    max_output_bytes=65536,
    max_parallel=2,
    **UIDS,
)
STDIO = {"type": "stdio", "cases": [{"input": "1 2\n", "output": "3\n"}]}
ADD = {
    "type": "function",
    "entry_point": "add",
    "cases": [{"args": [1, 2], "expected": 3}, {"args": [5, 7], "expected": 12}],
}
ADD_ASSERT = {
    "type": "assert",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 7) == 12\n",
}
GOOD_STDIO = "a, b = map(int, input().split())\nprint(a + b)\n"
GOOD_ADD = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def verifier():
    from rlvr.sandbox.verifier import CodeVerifier

    v = CodeVerifier(CFG)  # raises, failing every test here, if isolation cannot be set up
    yield v
    v.close()


def block(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```\n"


def score(verifier, tests: dict, code: str):
    (result,) = verifier.verify(
        [Problem(id=f"p{secrets.token_hex(4)}", prompt="", tests=tests, verifier="code")], [block(code)]
    )
    return result


def sandbox_pids() -> list[int]:
    """Processes running as any sandbox uid (the range the config draws from)."""
    lo, hi = CFG.uid_base, CFG.uid_base + CFG.uid_count
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(ln for ln in f if ln.startswith("Uid:")).split()[1])
        except (OSError, StopIteration):
            continue
        if lo <= uid < hi:
            found.append(int(pid))
    return found


def assert_host_ok(verifier) -> None:
    assert sandbox_pids() == [], "a process of a sandboxed run outlived it"
    assert score(verifier, STDIO, GOOD_STDIO).components["correct"] == 1.0, "the next execution must work"


def test_correct_partial_wrong_all_formats(verifier):
    stdio = {
        "type": "stdio",
        "cases": [{"input": f"{a} {b}\n", "output": f"{a + b}\n"} for a, b in [(1, 2), (3, 4), (0, 0), (10, -3)]],
    }
    partial = "a, b = map(int, input().split())\nprint(a + b if a < 5 else 0)\n"
    assert score(verifier, stdio, GOOD_STDIO).components["correct"] == 1.0
    assert score(verifier, stdio, partial).components["correct"] == 0.75
    assert score(verifier, stdio, "print(42)\n").components["correct"] == 0.0
    assert score(verifier, ADD, GOOD_ADD).components["correct"] == 1.0
    assert score(verifier, ADD, "def add(a, b):\n    return 3\n").components["correct"] == 0.5
    assert score(verifier, ADD, "def add(a, b):\n    return a - b\n").components["correct"] == 0.0
    assert score(verifier, ADD_ASSERT, GOOD_ADD).components["correct"] == 1.0
    assert score(verifier, ADD_ASSERT, "def add(a, b):\n    return 3\n").components["correct"] == 0.0
    r = score(verifier, ADD, "def add(a, b) return a\n")
    assert r.valid and r.components["correct"] == 0.0 and r.info["failures"] == {"syntax_error": 2}


def test_fork_bomb(verifier):
    r = score(
        verifier, STDIO, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    assert r.valid and r.components["correct"] == 0.0
    assert_host_ok(verifier)


def test_memory_bomb(verifier):
    r = score(verifier, STDIO, "x = []\nwhile True:\n    x.append(bytearray(10 ** 7))\n")
    assert r.valid and r.components["correct"] == 0.0 and r.info["failures"] == {"memory": 1}
    assert_host_ok(verifier)


@pytest.mark.parametrize(
    "code",
    [
        "while True:\n    pass\n",
        "import time\ntime.sleep(10 ** 6)\n",
        "import signal, time\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)\n",
    ],
    ids=["infinite_loop", "sleep_forever", "ignores_sigterm"],
)
def test_never_ends(verifier, code):
    r = score(verifier, STDIO, code)
    assert r.valid and r.components["correct"] == 0.0
    assert set(r.info["failures"]) <= {"wall_timeout", "cpu_limit"}
    assert_host_ok(verifier)


def test_double_forked_daemon_does_not_survive(verifier):
    daemon = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            time.sleep(0.05)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "time.sleep(0.4)  # the daemon is up meanwhile: the scan below must see it\n"
        "print(3)\n"
    )
    seen: set[int] = set()
    done = threading.Event()

    def watch():
        while not done.is_set():
            seen.update(sandbox_pids())
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = score(verifier, STDIO, daemon)
    finally:
        done.set()
        watcher.join()
    assert r.valid and r.components["correct"] == 1.0  # its answer is right: the true score
    # The scan saw the program and its daemon while they ran, so it would see a survivor.
    assert len(seen) >= 2
    assert_host_ok(verifier)


def test_gigabyte_of_output(verifier):
    r = score(
        verifier, STDIO, "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n"
    )
    # Stopped at the file-size limit (8 MiB here), not after a gigabyte.
    assert r.valid and r.components["correct"] == 0.0 and r.info["failures"] == {"output_limit": 1}
    assert_host_ok(verifier)


def test_writes_outside_workdir_do_not_reach_host(verifier, tmp_path):
    open_dir = tmp_path / "world-writable"
    open_dir.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(open_dir, 0o777)  # permissions would allow it: only the filesystem view stops it
    tag = secrets.token_hex(6)
    targets = [
        str(open_dir / f"pwned-{tag}"),
        f"/tmp/pwned-{tag}",
        f"/root/pwned-{tag}",
        f"{os.getcwd()}/pwned-{tag}",
        f"/var/tmp/pwned-{tag}",
        f"/dev/shm/pwned-{tag}",
    ]
    code = (
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('pwned')\n"
        "    except OSError:\n"
        "        pass\n"
        "print(3)\n"
    )
    r = score(verifier, STDIO, code)
    assert r.valid and r.components["correct"] == 1.0
    assert [t for t in targets if os.path.exists(t)] == []
    assert_host_ok(verifier)


def test_parent_environment_secret_is_not_visible(verifier, monkeypatch):
    secret = "s3cr3t-" + secrets.token_hex(8)
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    code = (
        "import os\n"
        "found = os.environ.get('RLVR_TEST_SECRET', '')\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        data = open(f'/proc/{pid}/environ', 'rb').read().decode()\n"
        "    except OSError:\n"
        "        continue\n"
        "    found = found or next((v.split('=', 1)[1] for v in data.split('\\0') if 'RLVR_TEST_SECRET' in v), '')\n"
        "print(found)\n"
    )
    tests = {"type": "stdio", "cases": [{"input": "", "output": secret}]}
    r = score(verifier, tests, code)
    assert r.valid and r.components["correct"] == 0.0
    assert_host_ok(verifier)


ESCAPE_PROBES = (
    "import ctypes, os, socket, threading\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def errno(rc):\n    return ctypes.get_errno() if rc == -1 else 'allowed'\n"
    "out = [errno(libc.unshare(0x10000000)),\n"  # CLONE_NEWUSER
    "       errno(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),\n"
    "       errno(libc.ptrace(0, 0, 0, 0))]\n"  # PTRACE_TRACEME
    "try:\n    socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close()\n    out.append('allowed')\n"
    "except OSError as e:\n    out.append(e.errno)\n"
    "a, b = socket.socketpair()\na.send(b'x')\nout.append(b.recv(1) == b'x')\n"
    "t = threading.Thread(target=lambda: out.append('thread'))\nt.start()\nt.join()\n"
    "pid = os.fork()\nif pid == 0:\n    os._exit(7)\n"
    "out.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\nprint(out)\n"
)


@pytest.mark.parametrize("seccomp", [True, False])
def test_syscall_filter_denies_escape_interfaces_and_keeps_threads_fork_and_unix_sockets(seccomp):
    from rlvr.sandbox._child import libseccomp
    from rlvr.sandbox.verifier import CodeVerifier

    if seccomp and libseccomp is None:
        pytest.skip("libseccomp2 is not installed here: no syscall filter to test")
    v = CodeVerifier(CodeConfig(**{**CFG.__dict__, "seccomp": seccomp}))
    try:
        # EPERM for unshare, mount and ptrace; no IPv6 socket (EAFNOSUPPORT); AF_UNIX, threads, fork still work
        filtered = "[1, 1, 1, 97, True, 'thread', 7]\n"
        r = score(v, {"type": "stdio", "cases": [{"input": "", "output": filtered}]}, ESCAPE_PROBES)
        assert r.valid and r.components["correct"] == (1.0 if seccomp else 0.0), r
        assert_host_ok(v)
    finally:
        v.close()


@pytest.mark.parametrize("seccomp", [True, False])  # the network namespace alone blocks it, and so does the filter
def test_cannot_connect_to_host_listener(seccomp):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    from rlvr.sandbox.verifier import CodeVerifier

    v = CodeVerifier(CodeConfig(**{**CFG.__dict__, "seccomp": seccomp}))
    try:
        code = (
            "import socket\ns = socket.socket()\ns.settimeout(0.5)\n"
            f"try:\n    s.connect(('127.0.0.1', {port}))\n    print('connected')\n"
            "except OSError as e:\n    print('blocked', e)\n"
        )
        tests = {"type": "stdio", "cases": [{"input": "", "output": "connected"}]}
        r = score(v, tests, code)
        assert r.valid and r.components["correct"] == 0.0
        with pytest.raises(socket.timeout):
            listener.accept()
        assert_host_ok(v)
    finally:
        v.close()
        listener.close()


def test_killing_its_parent(verifier):
    code = (
        "import os, signal\n"
        "for pid in (os.getppid(), 1, os.getpgid(0) - 1):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(3, flush=True)\n"
    )
    r = score(verifier, STDIO, code)
    assert r.valid and r.components["correct"] == 1.0  # the harness survives and still judges
    r = score(verifier, STDIO, "import os, signal\nprint(3, flush=True)\nos.kill(-1, signal.SIGKILL)\n")
    assert r.valid and r.components["correct"] == 0.0  # it killed itself: not a clean exit
    assert_host_ok(verifier)


@pytest.mark.parametrize("exit_call", ["import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"])
def test_exit_before_checks(verifier, exit_call):
    for tests in (ADD, ADD_ASSERT):
        assert score(verifier, tests, exit_call + GOOD_ADD).components["correct"] == 0.0
        inside = f"def add(a, b):\n    {exit_call.replace(chr(10), '; ', 1).strip()}\n"
        assert score(verifier, tests, inside).components["correct"] == 0.0
    assert score(verifier, STDIO, exit_call + GOOD_STDIO).components["correct"] == 0.0
    assert_host_ok(verifier)


@pytest.mark.parametrize(
    "cls",
    [
        "class R:\n    def __eq__(self, other):\n        return True\n",
        "class R(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n",
    ],
)
def test_always_equal_result(verifier, cls):
    code = cls + "def add(a, b):\n    return R(0) if R is not int else 0\n"
    for tests in (ADD, ADD_ASSERT):
        r = score(verifier, tests, code)
        assert r.valid and r.components["correct"] == 0.0
    assert_host_ok(verifier)


def test_forged_verdicts(verifier):
    forge = (
        "import os, sys\n"
        "for fd in (1, 3):\n"
        "    for line in ('0 {\"passed\": true}', 'nonce 0 {\"passed\": true}', '0 {\"value\": 3}'):\n"
        "        try:\n"
        "            os.write(fd, (line + '\\n').encode())\n"
        "        except OSError:\n"
        "            pass\n"
        "os._exit(0)\n"
    )
    for tests in (ADD, ADD_ASSERT):
        assert score(verifier, tests, forge + GOOD_ADD).components["correct"] == 0.0
    assert_host_ok(verifier)


def test_cannot_find_expected_values(verifier, tmp_path):
    token = "expected-" + secrets.token_hex(8)
    data = tmp_path / "dataset.jsonl"
    data.write_text(f'{{"expected": "{token}"}}\n')
    os.chmod(tmp_path, 0o755)
    os.chmod(data, 0o644)  # a world-readable data file on the host, at a known path
    code = (
        "import gc, os\n"
        "def add(a, b):\n"
        "    found = [o for o in gc.get_objects() if isinstance(o, str) and o.startswith('expected-')]\n"
        "    for path in [" + repr(str(data)) + ", '/proc/1/cmdline', '/proc/1/environ', '/.h/in']:\n"
        "        try:\n"
        "            text = open(path).read()\n"
        "        except OSError:\n"
        "            continue\n"
        "        found += [w.strip('\"}') for w in text.split() if w.strip('\"').startswith('expected-')]\n"
        "    return found[0] if found else 'nothing'\n"
    )
    tests = {"type": "function", "entry_point": "add", "cases": [{"args": [1, 2], "expected": token}]}
    r = score(verifier, tests, code)
    assert r.valid and r.components["correct"] == 0.0
    assert_host_ok(verifier)


@pytest.mark.parametrize(
    "code",
    [
        "def f(n):\n    return f(n + 1)\nf(0)\n",
        "import sys\nsys.setrecursionlimit(10 ** 9)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n",
    ],
    ids=["recursion_error", "c_stack_overflow"],
)
def test_runaway_recursion(verifier, code):
    r = score(verifier, STDIO, code)
    assert r.valid and r.components["correct"] == 0.0
    assert_host_ok(verifier)


def test_thousands_of_threads(verifier):
    code = (
        "import threading, time\n"
        "threads = [threading.Thread(target=time.sleep, args=(30,), daemon=True) for _ in range(5000)]\n"
        "for t in threads:\n    t.start()\n"
        "print(3)\n"
    )
    r = score(verifier, STDIO, code)
    assert r.valid and r.components["correct"] == 0.0
    assert_host_ok(verifier)


def test_memory_spread_over_processes_is_capped_in_total():
    from rlvr.sandbox.verifier import CodeVerifier

    # 8 processes x 150 MiB each stay under the 256 MiB per-process limit; the total cap stops them.
    v = CodeVerifier(CodeConfig(case_timeout_s=3.0, timeout_s=6.0, memory_mb=256, total_memory_mb=400, **UIDS))
    try:
        code = (
            "import os, time\n"
            "for _ in range(7):\n"
            "    if os.fork() == 0:\n"
            "        break\n"
            "block = bytearray(150 << 20)\n"
            "for i in range(0, len(block), 4096):\n"
            "    block[i] = 1\n"
            "time.sleep(2)\n"
            "print(3)\n"
        )
        r = score(v, STDIO, code)
        assert r.valid and r.components["correct"] == 0.0 and r.info["failures"] == {"memory_total": 1}
        assert_host_ok(v)
    finally:
        v.close()
