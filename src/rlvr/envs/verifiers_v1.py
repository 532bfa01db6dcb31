"""verifiers 0.4's v1 environments, run by their own interpreter (env.python): a script, not rlvr.

    <env.python> verifiers_v1.py describe '<spec>'   # one JSON line: its tasks, rewards and metrics
    <env.python> verifiers_v1.py serve '<spec>'      # episodes as JSON lines (env.agent_protocol=lines)
    <env.python> verifiers_v1.py prepare '<spec>'    # its harnesses' programs installed, once

spec: {"id": the taskset's id, "settings": env.settings, "episode_timeout_s": ...}. It imports
verifiers and the environment's package, never rlvr (whose dependencies it need not have: verifiers
0.4 requires openai<3). `serve` loads the environment once (its SingleAgentEnv, or the Env its
package exports), holds its serving resources (tool servers, the interception server) and runs each
episode it is sent with `Env.run_slot`, the model client a relay (`EvalClientConfig`) whose base URL
is the episode's session on rlvr's endpoint: whatever the harness sends, the trajectory is what rlvr
sampled. An episode's answer: {"reward": the traces' reward (their weighted rewards' sum),
"components": each reward's score and each metric}; an episode whose scoring never ran is an error
with the errors verifiers recorded.

env.settings: `harness` (an id, or a dict with `id` and its config: the agent's harness; default the
taskset's own; `harness=null` names verifiers' `null` harness, a chat loop with the environment's tools),
`taskset` (its config's fields), `select` (a SelectConfig: include, exclude, shuffle, skip, limit),
`agent` (the seat's AgentConfig fields: max_turns, timeout, ...). Every seat runs in the subprocess
runtime; another runtime (docker, prime, modal, e2b, ...) is refused with its name (by rlvr, before
this script starts), and so is a harness that executes model-written code (bash, codex, ...: rlvr runs such code only in its sandbox),
and an environment of several agents (another agent's calls would be trained as the policy's).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import traceback
from typing import Any

RUNTIMES = ("subprocess",)
"""verifiers runtimes rlvr can give a harness; the hosted and container ones are refused by name."""
SETTINGS = ("harness", "taskset", "select", "agent")
MAX_ERROR_CHARS = 2000


def _env_config(spec: dict[str, Any]):
    """The environment's config: env.settings applied, its one seat in the subprocess runtime. An
    environment of several seats is refused (every seat's calls would reach the episode's session and be
    trained as the policy's: a judge's, a simulated user's)."""
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.utils.loaders import env_config_type, resolve_env_config

    settings = dict(spec.get("settings") or {})  # checked by rlvr (verifiers_hub.check_v1_settings)
    seats = [n for n, f in env_config_type(spec["id"]).model_fields.items() if isinstance(f.default, AgentConfig)]
    if len(seats) != 1:
        raise ValueError(
            f"its environment has {len(seats)} agents ({', '.join(seats)}); rlvr trains single-agent v1 "
            "environments only (another agent's calls, a judge's or a simulated user's, would be trained as the policy's)"
        )
    harness = "null" if "harness" in settings and settings["harness"] is None else settings.get("harness")
    seat = {"runtime": {"type": "subprocess"}, **(settings.get("agent") or {})}  # its type checked by rlvr
    if harness is not None:
        seat["harness"] = {"id": harness} if isinstance(harness, str) else dict(harness)
    config = resolve_env_config({"taskset": {"id": spec["id"], **(settings.get("taskset") or {})}, seats[0]: seat})
    if spec.get("episode_timeout_s"):
        config.timeout.episode = float(spec["episode_timeout_s"])
    return config


def _load(spec: dict[str, Any]):
    """(the environment, its tasks in order)."""
    from verifiers.v1.configs.select import SelectConfig
    from verifiers.v1.utils.loaders import load_environment

    env = load_environment(_env_config(spec))
    for harness in env._harnesses.values():
        if harness.EXECUTES_CODE:
            raise ValueError(
                f"env.settings.harness: verifiers' {harness.config.id!r} harness runs model-written code, which rlvr "
                "runs only in its sandbox, and that is not one of verifiers' runtimes yet: name a harness that "
                "does not (null: a chat loop with the environment's tools)"
            )
    taskset = env.taskset.select(SelectConfig(**(spec.get("settings") or {}).get("select", {})))
    if not taskset.bounded:
        raise ValueError(f"{spec['id']} is an infinite taskset: bound it with env.settings.select.limit")
    return env, list(taskset)


def _row(index: int, task) -> dict[str, Any]:
    data = task.data
    prompt = data.prompt
    if prompt is not None and not isinstance(prompt, str):
        prompt = [m.model_dump(mode="json", exclude_none=True) if hasattr(m, "model_dump") else m for m in prompt]
    if data.system_prompt and prompt is not None:
        text = prompt if isinstance(prompt, str) else None
        prompt = [{"role": "system", "content": data.system_prompt}] + (
            [{"role": "user", "content": text}] if text is not None else prompt
        )
    answer = getattr(data, "answer", None)
    return {
        "example_id": data.id or data.name or index,
        "task_index": index,
        "prompt": prompt if prompt is not None else "",
        "answer": None if answer is None else str(answer),
    }


def describe(spec: dict[str, Any]) -> dict[str, Any]:
    env, tasks = _load(spec)
    if not tasks:
        raise ValueError(f"{spec['id']} has no tasks (with env.settings.select, if set)")
    probe = tasks[0]
    import verifiers

    return {
        "version": verifiers.__version__,
        "rewards": [fn.__name__ for fn in probe.hooks("reward")],
        "metrics": [fn.__name__ for fn in probe.hooks("metric")],
        "train": [_row(i, t) for i, t in enumerate(tasks)],
    }


def _answer(episode) -> dict[str, Any]:
    traces = episode.traces
    scored = [t for t in traces if any(r is not None for r in t.rewards.values())]
    if not scored:
        errors = [e for t in traces for e in t.errors] + list(episode.errors)
        said = "; ".join(f"{e.type}: {e.message}" for e in errors) or "its scoring did not run"
        raise RuntimeError(said[:MAX_ERROR_CHARS])
    components: dict[str, float] = {}
    for trace in scored:
        for name, reward in trace.rewards.items():
            if reward is not None:
                components[name] = components.get(name, 0.0) + reward.score
        for name, value in trace.metrics.items():
            if value is not None:
                components[name] = components.get(name, 0.0) + float(value)
    return {"reward": sum(t.reward for t in scored), "components": components}


def serve(spec: dict[str, Any]) -> None:
    """Episodes as JSON lines on stdin, answers as JSON lines on stdout (rlvr.agents.command)."""
    import verifiers.v1 as vf

    out = sys.stdout
    sys.stdout = sys.stderr  # what the environment prints is not an answer
    env, tasks = _load(spec)
    write = threading.Lock()

    def answer(message: dict[str, Any]) -> None:
        with write:
            out.write(json.dumps(message) + "\n")
            out.flush()

    async def episode(message: dict[str, Any]) -> None:
        try:
            task = tasks[int(message["problem"]["metadata"]["verifiers_row"]["task_index"])]
            client = vf.EvalClientConfig(base_url=message["base_url"], api_key_var="RLVR_API_KEY")
            context = vf.ModelContext(model=message["model"], client=client)
            result = _answer(await env.run_slot(env.slots(task)[0], context))
            answer({"episode": message["episode"], "result": result})
        except Exception as exc:  # noqa: BLE001 - the episode fails, the process serves the others
            answer({"episode": message.get("episode"), "error": f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]})

    async def main() -> None:
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue = asyncio.Queue()
        threading.Thread(target=_read_lines, args=(loop, lines), daemon=True).start()
        running: set[asyncio.Task] = set()
        async with env.serving():
            while (line := await lines.get()) is not None:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                task = asyncio.ensure_future(episode(message))
                running.add(task)
                task.add_done_callback(running.discard)

    asyncio.run(main())


def prepare(spec: dict[str, Any]) -> None:
    """Each seat's harness set up once in a fresh runtime: what it installs (verifiers runs harness
    programs as uv scripts, their dependencies fetched on first use) is then in uv's cache, so episodes
    fetch nothing. `make verifiers-v1` runs it."""
    from verifiers.v1.configs.agent import agent_config_fields
    from verifiers.v1.runtimes import provision_runtime

    env, _ = _load(spec)

    async def main() -> None:
        for name, seat in agent_config_fields(env.config).items():
            async with provision_runtime(seat.runtime) as runtime:
                await env._harnesses[name].setup(runtime)

    asyncio.run(main())


def _read_lines(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue) -> None:
    for line in sys.stdin:
        loop.call_soon_threadsafe(lines.put_nowait, line)
    loop.call_soon_threadsafe(lines.put_nowait, None)


def main(argv: list[str]) -> int:
    mode, spec = argv[0], json.loads(argv[1])
    os.environ.setdefault("RLVR_API_KEY", "rlvr")
    # the harness programs' uv (verifiers runs them as uv scripts) is the one installed beside this interpreter
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    if mode == "describe":
        try:
            print(json.dumps({"ok": describe(spec)}))
        except Exception as exc:  # noqa: BLE001 - rlvr turns it into a config error naming the environment
            print(traceback.format_exc(), file=sys.stderr)
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]}))
        return 0
    if mode in ("serve", "prepare"):
        (serve if mode == "serve" else prepare)(spec)
        return 0
    print(f"usage: {argv and argv[0]} describe|serve|prepare SPEC", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
