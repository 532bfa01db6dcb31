"""An agent program in any language: a command run once per episode (env.agent_command).

    env.agent_command="node agent.js"        # or "python agent.py", "./agent", ...

Each episode starts the command (split as a shell would, run without a shell) with RLVR_BASE_URL (the
session's endpoint, OpenAI-style: append /chat/completions), RLVR_MODEL, and the problem as JSON in
RLVR_PROBLEM and on its standard input. What it prints last is its result: a JSON number (a reward),
a JSON object {"answer", "reward"}, or else the text of its last non-empty line (the final answer).
It runs in the episode's worker process, in that worker's process group: an episode that overruns
env.episode_timeout_s is killed with it. Only the last 64 KiB of its output are kept; what it writes
to standard error goes to the trainer's.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

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

    @classmethod
    def parse(cls, command: str) -> "Command":
        return cls(tuple(shlex.split(command)))

    @property
    def name(self) -> str:
        """What errors call it: the program (and its first argument: an interpreter's script)."""
        return " ".join(os.path.basename(a) for a in self.argv[:2]) or "command"

    def __call__(self, base_url: str, model: str, problem: dict[str, Any]) -> Any:
        text = json.dumps(problem)
        env = {**os.environ, "RLVR_BASE_URL": base_url, "RLVR_MODEL": model}
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
