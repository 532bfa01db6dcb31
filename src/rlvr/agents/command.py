"""An agent program in any language: a command (env.agent_command), per episode or long-lived.

    env.agent_command="node agent.js"        # or "python agent.py", "./agent", ...
    env.agent_protocol=lines                 # one process per env.workers, many episodes each

env.agent_protocol=once (the default): each episode starts the command (split as a shell would, run
without a shell) with RLVR_BASE_URL (the session's endpoint, OpenAI-style: append /chat/completions),
RLVR_MODEL, and the problem as JSON in RLVR_PROBLEM and on its standard input. What it prints last is
its result: a JSON number (a reward), a JSON object {"answer", "reward"}, or else the text of its
last non-empty line (the final answer). Only the last 64 KiB of its output are kept.

env.agent_protocol=lines: each worker process starts the command once, with RLVR_PROTOCOL=lines and
RLVR_MODEL, and sends it episodes as JSON lines on its standard input, {"episode", "base_url",
"model", "problem"}; it may run many at once, and answers each with a line {"episode", "result"}
(the result as above: a str, a number or {"answer", "reward"}) or {"episode", "error"} (that episode
failed). Other lines are ignored; a line is at most 64 KiB. Starting a process per episode costs
what the program's start costs (~85 ms of CPU for Node) on every episode: hundreds a step.
The end of its input is the end of the run: it should exit then.

Either way it runs in the episode's worker process, in that worker's process group: an episode that
overruns env.episode_timeout_s is killed with it (and a long-lived process with its worker, at the
rollout's end; one that exits fails the episodes it had and is started again for the next); what it
writes to standard error goes to the trainer's. Its environment is the trainer's (its PYTHONPATH, not
the worker's import path: a Python of another virtual environment imports its own packages).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import count
from typing import Any, Literal

from rlvr.harness.worker import outer_environ

TAIL = 65_536
ENV_CHARS = 100_000
"""RLVR_PROBLEM is set for problems up to this size (Linux refuses a variable over 128 KiB)."""


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, OSError):  # it did not read its input: nothing lost, RLVR_PROBLEM has it too
        pass


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    protocol: Literal["once", "lines"] = "once"
    label: str = ""
    """What errors call it; '': the program (and its first argument: an interpreter's script)."""

    @classmethod
    def parse(cls, command: str, protocol: Literal["once", "lines"] = "once") -> "Command":
        return cls(tuple(shlex.split(command)), protocol)

    @property
    def name(self) -> str:
        return self.label or " ".join(os.path.basename(a) for a in self.argv[:2]) or "command"

    def __call__(self, base_url: str, model: str, problem: dict[str, Any]) -> Any:
        if self.protocol == "lines":
            return _served(self, model).call(base_url, model, problem)
        text = json.dumps(problem)
        env = outer_environ(RLVR_BASE_URL=base_url, RLVR_MODEL=model)
        if len(text) <= ENV_CHARS:  # the kernel refuses a larger variable: the problem is on stdin anyway
            env["RLVR_PROBLEM"] = text
        proc = subprocess.Popen(list(self.argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        # its input is written beside the reading of its output: a program that prints before it reads
        # (or never reads) cannot stall on a full pipe
        threading.Thread(target=_feed, args=(proc.stdin, text.encode()), daemon=True).start()
        tail = b""
        while chunk := proc.stdout.read(TAIL):  # type: ignore[union-attr]
            tail = (tail + chunk)[-TAIL:]
        if proc.wait() != 0:
            raise RuntimeError(f"{self.name} exited with code {proc.returncode}")
        return result(tail.decode("utf-8", "replace"))


def result(output: str) -> Any:
    """A command's result from what it printed (see the module docstring)."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1].strip()
    try:
        value = json.loads(last)
    except ValueError:
        return last
    return value if isinstance(value, (dict, int, float)) and not isinstance(value, bool) else last


# --- env.agent_protocol=lines: in a worker process, its one long-lived process of the command -------

_SERVED: dict[Command, "_Served"] = {}
_SERVED_LOCK = threading.Lock()


def _served(command: Command, model: str) -> "_Served":
    """This worker's process of `command`, started on its first episode and again after it exits."""
    with _SERVED_LOCK:
        served = _SERVED.get(command)
        if served is None or served.exited is not None:
            served = _SERVED[command] = _Served(command, model)
        return served


class _Served:
    """One process of the command, its episodes sent as lines and answered by episode id."""

    def __init__(self, command: Command, model: str) -> None:
        self.name = command.name
        env = outer_environ(RLVR_PROTOCOL="lines", RLVR_MODEL=model)
        self.proc = subprocess.Popen(list(command.argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.waiting: dict[str, Future] = {}
        self.exited: int | None = None
        self._ids = count()
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # one line at a time on its input, whatever thread sends it
        threading.Thread(target=self._read, name="rlvr-agent-lines", daemon=True).start()

    def call(self, base_url: str, model: str, problem: dict[str, Any]) -> Any:
        future: Future = Future()
        line = None
        with self._lock:
            if self.exited is None:
                episode = f"e{next(self._ids)}"
                self.waiting[episode] = future
                line = json.dumps({"episode": episode, "base_url": base_url, "model": model, "problem": problem})
        if line is None:
            raise RuntimeError(self._gone())
        try:
            with self._writing:
                self.proc.stdin.write(line.encode() + b"\n")  # type: ignore[union-attr]
                self.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            pass  # it exited: the reader fails what it had, this episode included
        return future.result()

    def _read(self) -> None:
        while line := self.proc.stdout.readline(TAIL):  # type: ignore[union-attr]
            try:
                message = json.loads(line)
                episode = message["episode"]
            except (ValueError, TypeError, KeyError):
                continue  # not an answer: a log line, or a line cut at TAIL
            with self._lock:
                future = self.waiting.pop(episode, None) if isinstance(episode, str) else None
            if future is None:
                continue
            if "error" in message:
                future.set_exception(RuntimeError(f"{self.name} failed the episode: {str(message['error'])[:2000]}"))
            else:
                future.set_result(message.get("result", ""))
        code = self.proc.wait()
        with self._lock:
            self.exited = code
            waiting, self.waiting = self.waiting, {}
        for future in waiting.values():
            future.set_exception(RuntimeError(self._gone()))

    def _gone(self) -> str:
        return f"{self.name} (env.agent_protocol=lines) exited with code {self.exited} before it answered the episode"
