"""The trusted side of an `assert` test (imported by `_harness.py`): check(candidate) runs here,
the model's program runs in another process.

`run_assert` is called in the child the harness forked for the run. It starts the program in a
fresh interpreter (`_program.py`, exec'd after `enter_child` dropped it to the sandbox uid under
the limits and the syscall filter), then runs the problem's check code in this process with
`candidate` a proxy: each call sends its arguments as plain data down a pipe and returns the
program's plain reply. The nonce, the check code and its expected values exist only here; this
process is not dumpable, so the program can neither ptrace it nor read its memory or descriptors
through /proc, and the verdict pipe is never among the program's descriptors. A program that dies,
hangs (the harness's deadline), or answers out of protocol fails the case, whatever the check code
does with the exception it then sees.

The check code sees only what the problem gives it: its own text and `tests.prefix` (HumanEval's
prompt, whose helpers some checks call), never the program's globals. A check that fails on a
name it was not given is reported as the problem's error (the sample is invalid), not as a wrong
answer.
"""

import builtins
import json  # imported once by the fork server, not per run
import marshal
import os
import sys

from _child import dumps, enter_child, libc

PR_SET_DUMPABLE = 4
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_program.py"), encoding="utf-8") as _f:
    PROGRAM = _f.read()  # read before the harness pivots into the private root; exec'd with -c
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _program import decode  # noqa: E402

del sys.path[0]

ERRORS = {name: cls for name, cls in vars(builtins).items() if isinstance(cls, type) and issubclass(cls, Exception)}


class ProgramFailed(Exception):
    """The program died, or broke the protocol: the case fails whatever check() does next."""


def start_program(req, stdin_fd, out_fd, err_fd, verdict_fd):
    """Fork and exec the program process; (pid, calls writer, replies reader) for this side."""
    calls_r, calls_w = os.pipe()
    replies_r, replies_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            for fd in (verdict_fd, calls_w, replies_r):
                os.close(fd)
            enter_child(req, stdin_fd, out_fd, err_fd, calls_r, replies_w)
            os.execve(req["python"], [req["python"], "-I", "-S", "-B", "-c", PROGRAM], dict(os.environ))
        except BaseException as exc:
            try:
                os.write(2, f"harness program: {type(exc).__name__}: {exc}\n".encode())
            except BaseException:
                pass
        os._exit(125)
    for fd in (stdin_fd, out_fd, err_fd, calls_r, replies_w):
        os.close(fd)
    return pid, calls_w, os.fdopen(replies_r, "rb")


def run_assert(req, stdin_fd, out_fd, err_fd, verdict_fd):
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # before the program exists
    nonce, cap = req["nonce"], req["max_output_bytes"]
    pid, calls, replies = start_program(req, stdin_fd, out_fd, err_fd, verdict_fd)
    failed = []

    def send(obj):
        data = marshal.dumps(obj)
        data = len(data).to_bytes(4, "big") + data
        while data:
            data = data[os.write(calls, data) :]

    def emit(tag, obj):
        os.write(verdict_fd, f"{nonce} {tag} {dumps(obj)}\n".encode())

    def program_gone(what):
        _, status = os.waitpid(pid, 0)
        sig = -os.waitstatus_to_exitcode(status)
        how = f"killed by signal {sig}" if sig > 0 else f"exit status {os.waitstatus_to_exitcode(status)}"
        return ProgramFailed(f"the program ended {what} ({how})")

    def receive(what):
        line = replies.readline(cap + 1)
        if not line.endswith(b"\n"):
            raise program_gone(what) if not line else ProgramFailed("the program's reply is over the output limit")
        try:
            return json.loads(line)
        except ValueError:
            raise ProgramFailed("the program's reply is not the protocol's") from None

    try:
        send(
            {
                "source": req["source"],
                "entry_point": req["entry_point"],
                "file": f"{req['workdir']}/solution.py",
                "sys_path": req["sys_path"],
            }
        )
        first = receive("while loading")
    except (ProgramFailed, OSError) as exc:
        emit("load", str(exc))
        os._exit(1)
    if type(first) is not dict or "ready" not in first:
        if type(first) is dict and "syntax_error" in first:
            os.write(verdict_fd, b"syntax_error\n")
        else:
            emit("load", str(first.get("load") if type(first) is dict else first)[:500])
        os._exit(1)

    def candidate(*args, **kwargs):
        if failed:
            raise failed[0]
        try:
            send((args, kwargs))
            reply = receive("during a call")
            if type(reply) is not dict:
                raise ProgramFailed("the program's reply is not the protocol's")
            if "value" in reply:
                return decode(reply["value"])
            name, message = str(reply.get("error")), str(reply.get("message"))
        except (ProgramFailed, OSError, ValueError) as exc:
            failed.append(exc if isinstance(exc, ProgramFailed) else ProgramFailed(f"{type(exc).__name__}: {exc}"))
            raise failed[0] from None
        cls = ERRORS.get(name)
        raised.append(True)
        raise cls(message) if cls is not None else RuntimeError(f"{name}: {message}")

    test_ns = {"__builtins__": builtins, "__name__": "__check__"}
    raised = []
    try:
        exec(compile(req["test"], "test.py", "exec"), test_ns)
        test_ns[req["entry_point"]] = candidate  # a check that calls the function by its name (HumanEval/33)
        test_ns["check"](candidate)
        result = {"passed": True} if not failed else {"passed": False, "error": str(failed[0])}
    except BaseException as exc:
        result = {"passed": False, "error": str(failed[0]) if failed else f"{type(exc).__name__}: {str(exc)[:300]}"}
        if isinstance(exc, NameError) and not failed and not raised:
            result["check_error"] = True  # the check code needs a name no one gave it: the data's fault
    emit(0, result)
    os._exit(0)
