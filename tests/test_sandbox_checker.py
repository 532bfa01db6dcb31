"""Assert tests under the trusted checker: the program cannot find the nonce or the check code, nor forge a verdict.

Each search below is shown to work where the secret does live (a function-mode run, whose
process holds its request), then to find nothing in assert mode; each forgery scores 0; both
with and without the syscall filter.
"""

from __future__ import annotations

import json
import secrets
import sys

import pytest

from rlvr.config.code import CodeConfig

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox needs Linux namespaces")

from test_sandbox_hostile import CFG, assert_host_ok, score  # noqa: E402

# What the program can reach of its own process: frames, the garbage collector, its raw memory
# (read in place: after the uid change the kernel closes /proc/self/mem to it).
SEARCH = r"""
import gc, os, re, sys

def leaks(marker):
    found = set()
    f = sys._getframe()
    while f is not None:                                     # every frame up the stack
        for scope in (f.f_locals, f.f_globals):
            for k, v in list(scope.items()):
                if k == "nonce" and isinstance(v, str):
                    found.add("frame:" + v)
                if isinstance(v, dict) and isinstance(v.get("nonce"), str):
                    found.add("frame:" + v["nonce"])
        f = f.f_back
    for o in gc.get_objects():                               # every object the collector tracks
        if isinstance(o, dict) and isinstance(o.get("nonce"), str):
            found.add("gc:" + o["nonce"])
        if isinstance(o, dict) and isinstance(o.get("test"), str):
            found.add("gc-test:" + o["test"][:40])
    pattern = re.compile(re.escape(marker.encode()) + rb"[0-9a-f]{16}")
    import ctypes
    with open("/proc/self/maps") as maps:                    # the heap, the stack, every anonymous mapping
        for line in maps:
            fields = line.split()
            if not fields[1].startswith("rw") or (len(fields) > 5 and fields[5] not in ("[heap]", "[stack]")):
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            data = ctypes.string_at(lo, hi - lo)
            found.update("mem:" + m.decode() for m in pattern.findall(data))
    return sorted(found)
"""


@pytest.fixture(scope="module", params=[True, False], ids=["filter", "no-filter"])
def verifier(request):
    from rlvr.sandbox._child import libseccomp
    from rlvr.sandbox.verifier import CodeVerifier

    if request.param and libseccomp is None:
        pytest.skip("libseccomp2 is not installed here: no syscall filter to test")
    v = CodeVerifier(CodeConfig(**{**CFG.__dict__, "seccomp": request.param}))
    yield v
    v.close()


def test_the_searches_find_the_secrets_where_they_live(verifier):
    """Function mode: the program's process holds its request (the nonce, the arguments)."""
    marker = "SECRET-"
    token = marker + secrets.token_hex(8)
    run = verifier.pool.submit(
        "function",
        SEARCH + "def leaks_of(x):\n    return leaks('SECRET-')\n",
        [{"args": [token]}],
        entry_point="leaks_of",
    ).result()
    assert run.ok
    value = json.loads(run.cases[0]["result"].split(" ", 2)[2])["value"]
    assert f"frame:{run.nonce}" in value and f"gc:{run.nonce}" in value and f"mem:{token}" in value, value


def test_an_assert_programs_process_holds_no_nonce_no_check_code_no_expected_values(verifier):
    token, arg = ("SECRET-" + secrets.token_hex(8) for _ in range(2))
    # the search finds the argument the call carried (it works here too), and nothing of the checker's
    tests = {
        "type": "assert",
        "entry_point": "leaks_of",
        "test": f"EXPECTED = {token!r}\ndef check(candidate):\n    assert candidate({arg!r}) == ['mem:{arg}']\n",
    }
    r = score(verifier, tests, SEARCH + "def leaks_of(x):\n    return leaks('SECRET-')\n")
    assert r.valid and r.components["correct"] == 1.0, r.info
    assert_host_ok(verifier)


ADD_ASSERT = {
    "type": "assert",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 7) == 12\n",
}
WRONG = "def add(a, b):\n    return -1\n"
PASS_LINES = (
    "import gc, os, sys\n"
    "def _lines():\n"
    "    guesses = {o['nonce'] for o in gc.get_objects() if isinstance(o, dict) and isinstance(o.get('nonce'), str)}\n"
    "    guesses |= {'0' * 32, 'nonce'}\n"
    '    return [f\'{n} 0 {{"passed": true}}\\n{n} 0 {{"value": 3}}\\n{{"value": 3}}\\n\'.encode() for n in guesses]\n'
    "def _forge():\n"
    "    for fd in range(1024):\n"
    "        for line in _lines():\n"
    "            try:\n"
    "                os.write(fd, line)\n"
    "            except OSError:\n"
    "                pass\n"
)
HOSTILE = {
    "writes_to_every_descriptor": PASS_LINES + "_forge()\n" + WRONG,
    "writes_then_exits_inside_the_call": PASS_LINES + "def add(a, b):\n    _forge()\n    os._exit(0)\n",
    "atexit_hook_writes_a_pass_line": PASS_LINES + "import atexit\natexit.register(_forge)\n" + WRONG,
    "frame_walk_then_forge": (
        "import os, sys\n"
        "def add(a, b):\n"
        "    f = sys._getframe()\n"
        "    while f is not None:\n"
        "        n = f.f_locals.get('nonce')\n"
        "        if isinstance(n, str):\n"
        "            for fd in range(1024):\n"
        "                try:\n"
        "                    os.write(fd, (n + ' 0 {\"passed\": true}\\n').encode())\n"
        "                except OSError:\n"
        "                    pass\n"
        "            os._exit(0)\n"
        "        f = f.f_back\n"
        "    return -1\n"
    ),
    "reads_the_check_code_for_the_answers": (
        "import gc, re\n"
        "def add(a, b):\n"
        "    for o in gc.get_objects():\n"
        "        if isinstance(o, str) and 'def check' in o:\n"
        "            for x, y, want in re.findall(r'candidate\\((\\d+), (\\d+)\\) == (\\d+)', o):\n"
        "                if (int(x), int(y)) == (a, b):\n"
        "                    return int(want)\n"
        "    return -1\n"
    ),
    "the_checkers_descriptors_and_memory": (
        "import os\n"
        "def add(a, b):\n"
        "    p = os.getppid()\n"
        "    for path in (f'/proc/{p}/fd/3', f'/proc/{p}/fd/1', '/proc/1/fd/1'):\n"
        "        try:\n"
        "            fd = os.open(path, os.O_WRONLY)\n"
        "            os.write(fd, b'0 {\"passed\": true}\\n')\n"
        "        except OSError:\n"
        "            pass\n"
        "    try:\n"
        "        open(f'/proc/{p}/mem', 'rb').read(1)\n"
        "        return 'read the checker'\n"
        "    except OSError:\n"
        "        return -1\n"
    ),
    "kills_the_checker": "import os, signal\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return a + b\n",
    "kills_itself": "import os, signal\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "hangs": "def add(a, b):\n    while True:\n        pass\n",
    "replies_out_of_protocol": (
        "import os\n"
        "def add(a, b):\n"
        "    os.write(4, b'{\"value\": 12}\\n')\n"  # the answer to the next call, early
        "    return a + b if (a, b) == (1, 2) else -1\n"
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_assert_programs_score_zero(verifier, name):
    r = score(verifier, ADD_ASSERT, HOSTILE[name])
    assert r.components["correct"] == 0.0, (name, r)


def test_a_correct_program_still_passes_and_the_checker_reports_why_one_fails(verifier):
    assert score(verifier, ADD_ASSERT, "def add(a, b):\n    return a + b\n").components["correct"] == 1.0
    tuples = {
        "type": "assert",
        "entry_point": "pair",
        "test": "def check(candidate):\n    assert candidate([1, 2]) == (1, 2)\n"
        "    assert candidate({1: {2}}) == ({1: {2}},)\n"
        "    try:\n        candidate(None)\n        raise AssertionError('no error')\n"
        "    except ValueError:\n        pass\n",
    }
    code = "def pair(x):\n    if x is None:\n        raise ValueError('none')\n    return tuple(x) if isinstance(x, list) else (x,)\n"
    assert score(verifier, tuples, code).components["correct"] == 1.0  # tuples, sets, int keys and errors cross
    r = score(verifier, ADD_ASSERT, "def add(a, b):\n    return [a, b]\n")
    assert r.components["correct"] == 0.0 and r.info["failures"] == {"assertion_failed": 1}
    r = score(verifier, ADD_ASSERT, "def add(a, b):\n    return object()\n")
    assert r.components["correct"] == 0.0
    assert_host_ok(verifier)
