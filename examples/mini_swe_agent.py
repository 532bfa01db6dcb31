"""mini-swe-agent (`pip install mini-swe-agent`), a harness not written here, as rlvr's agent: its own
`DefaultAgent` with its own `mini.yaml` (the system prompt, the task template, the observation and
format-error templates, the `bash` tool), its `LitellmModel` pointed at the episode's base URL, and
each command it runs in rlvr's sandbox (namespaces, no network, rlvr's limits) instead of the host's
shell: the commands are the policy's, so they are model-written code.

    rlvr train --config configs/mini_swe_agent.yaml     # env.agent=examples/mini_swe_agent.py:solve

The episode's answer is what the agent submits (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` and the
answer on the lines after it), graded by the problem's verifier. Each command runs in a fresh
sandbox: files do not persist from one command to the next (mini-swe-agent's own rule already says
that directory and variable changes do not).
"""

from __future__ import annotations

import os
from typing import Any

import yaml

STEP_LIMIT = 4
"""Model calls an episode may make (mini.yaml sets none: a run is bounded by its cost)."""
COMMAND_TIMEOUT_S = 10.0

# litellm reads its model price list from the network at import unless told to use its own copy;
# mini-swe-agent stops a run whose cost it cannot compute unless told to ignore it, and retries a
# refused request for minutes (the endpoint is local: its answer is final)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")

_SANDBOX: dict[str, Any] = {}


def sandboxed(command: str, timeout_s: float) -> dict[str, Any]:
    """mini-swe-agent's execution result for `command`, run by bash inside rlvr's sandbox."""
    from rlvr.config.code import CodeConfig
    from rlvr.tools import python_tool

    if "python" not in _SANDBOX:  # one sandbox per worker process, opened on first use
        _SANDBOX["python"] = python_tool(CodeConfig())
    program = (
        "import subprocess, sys\n"
        f"run = subprocess.run(['bash', '-c', {command!r}], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)\n"
        "sys.stdout.write(run.stdout.decode('utf-8', 'replace') + f'\\n__returncode__={run.returncode}')\n"
    )
    try:
        out = _SANDBOX["python"].timed({"code": program}, timeout_s)
    except Exception as exc:  # noqa: BLE001 - what the agent sees, as mini-swe-agent reports a failed command
        return {
            "output": "",
            "returncode": -1,
            "exception_info": f"An error occurred while executing the command: {exc}",
        }
    text, _, code = out.rpartition("__returncode__=")
    if not code.strip().lstrip("-").isdigit():  # killed before it printed its code (a limit, a timeout)
        return {"output": out, "returncode": -1, "exception_info": "the command was stopped by the sandbox"}
    return {"output": text[:-1] if text.endswith("\n") else text, "returncode": int(code), "exception_info": ""}


def solve(base_url: str, model: str, problem: dict) -> str:
    import litellm
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import builtin_config_dir
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    class SandboxEnvironment(LocalEnvironment):
        """mini-swe-agent's local environment (its template variables, its submission check), each
        command run in rlvr's sandbox."""

        def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
            output = sandboxed(action.get("command", ""), float(timeout or COMMAND_TIMEOUT_S))
            self._check_finished(output)
            return output

    litellm.suppress_debug_info = True  # else it prints its provider list on every failed cost lookup
    config = yaml.safe_load((builtin_config_dir / "mini.yaml").read_text())
    llm = LitellmModel(
        model_name=f"openai/{model}",
        model_kwargs={**config["model"].get("model_kwargs", {}), "api_base": base_url, "api_key": "rlvr"},
        **{k: v for k, v in config["model"].items() if k != "model_kwargs"},
    )
    env = SandboxEnvironment(**config.get("environment", {}))
    agent = DefaultAgent(llm, env, **{**config["agent"], "step_limit": STEP_LIMIT})
    result = agent.run(task=problem["prompt"])
    return str(result.get("submission", "")).strip()
