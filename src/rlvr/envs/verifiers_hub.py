"""Prime Intellect's `verifiers` environments: their data, rollout and rubric against rlvr's policy.

    env.name=verifiers:reverse-text task.name=verifiers     # env.settings: load_environment's arguments

`vf.load_environment(id, **env.settings)` builds the environment (its package installed, as
`prime env install` or `pip install` puts it). Its dataset is the task: each row a problem (held
out: its eval dataset, else data.eval_size rows drawn as for a data file). Each episode runs the
environment's own rollout (`Environment.run_rollout`: single-turn, multi-turn, its tools and
parsers) with a client pointed at the episode's session on rlvr's endpoint, so the trajectory is
the tokens rlvr sampled (rlvr.agents); its rubric scores it. The rubric's reward (its weighted sum)
is the outcome: `correct` (verifier 'env' reads it as the episode's score); each rubric function
is a component of the same name, logged as `reward/<name>/mean` (weight 0 by default, since
`correct` already holds it: `reward.weights.<name>` adds one on top).

It is user code: loading and rollouts run in harness workers (the environments' bounds apply), and
the trainer reads back plain data only. A rubric that scores whole groups at once sees one rollout at
a time. That is verifiers' classic API, in the trainer's interpreter (`verifiers<0.4`).

verifiers 0.4 is v1 only (a Taskset, its tasks' `@vf.reward` and `@vf.metric` functions, a harness
that runs the agent) and requires openai<3: it runs in an interpreter of its own, env.python (a virtual
environment with verifiers 0.4 and the environment's package), as a long-lived command in each worker
(rlvr.envs.verifiers_v1, env.agent_protocol=lines). Its rewards' scores and its metrics are the
components (weight 0); their weighted sum is `correct`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, ClassVar
from unittest import mock

from rlvr.configlib import ConfigError
from rlvr.envs import AgentProgram
from rlvr.harness import CallFailed, Worker
from rlvr.records import Problem

PREFIX = "verifiers:"
LOAD_TIMEOUT_S = 300.0
SOURCE = "verifiers"
TASK = "verifiers"
RESERVED = frozenset({"format", "correct", "process", "agent"})
"""Component names rlvr computes itself."""
"""task.name=verifiers: the rows of the environment env.name=verifiers:<id> names."""
POLICY_ERRORS = frozenset(
    {"InvalidModelResponseError", "EmptyModelResponseError", "OverlongPromptError", "ToolParseError"}
)
"""verifiers errors that are the policy's doing (an empty or malformed reply, a context overrun): the
episode is a sample, scored as its rubric scored it; any other error fails the episode (invalid, counted)."""


def is_verifiers(env_name: str) -> bool:
    return env_name.startswith(PREFIX)


def id_of(env_name: str) -> str:
    """The environment's id in env.name=verifiers:<id>."""
    return env_name[len(PREFIX) :]


class Verifiers(AgentProgram):
    """env.name=verifiers:<id>: episodes run by rlvr.agents with the program `Rollout`."""

    components: ClassVar[dict[str, float]] = {}
    settings_keys = None
    hosts_user_code = True

    @staticmethod
    def components_of(env_cfg) -> dict[str, float]:
        return components(env_cfg)


@dataclass(frozen=True)
class Rollout:
    """The agent program of a verifiers environment: one rollout and its rubric per episode."""

    env_id: str
    args: str
    """load_environment's keyword arguments as JSON (what travels to the workers)."""

    @property
    def name(self) -> str:
        return self.env_id

    def __call__(self, base_url: str, model: str, problem: dict[str, Any]) -> dict[str, Any]:
        import verifiers as vf

        os.environ.setdefault("RLVR_API_KEY", "rlvr")
        client = vf.ClientConfig(api_base_url=base_url, api_key_var="RLVR_API_KEY", max_retries=0)
        env, loop = _loaded(self.env_id, self.args)
        row = problem["metadata"]["verifiers_row"]
        out = asyncio.run_coroutine_threadsafe(env.run_rollout(row, client, model, {}), loop).result()
        error = out.get("error")
        if error and error.get("error") not in POLICY_ERRORS:
            # its message is often the bare class name (`ModelError`): the chain of causes says what failed
            chain = error.get("error_chain_repr") or ""
            cause = f" (from {chain})" if " -> " in chain else ""
            raise RuntimeError(f"{self.env_id}'s rollout failed: {error.get('error')}: {error.get('message')}{cause}")
        names = set(env.rubric._get_reward_func_names())  # its monitors' metrics are not rewards
        metrics = {k: v for k, v in (out.get("metrics") or {}).items() if k in names}
        return {"reward": out["reward"], "components": metrics}


_LOADING = threading.Lock()
_LOADED: dict[tuple[str, str], tuple[Any, asyncio.AbstractEventLoop]] = {}


def _loaded(env_id: str, args: str) -> tuple[Any, asyncio.AbstractEventLoop]:
    """The environment, loaded once per worker process, and the one event loop (on a thread of its
    own) that all its rollouts run on: what it builds at load time (a judge's client) stays on one
    loop. A worker's calls run in threads, where `signal.signal` raises: the SIGINT and SIGTERM
    teardown handlers verifiers installs are left out (a worker is killed, not interrupted)."""
    with _LOADING:
        if (env_id, args) not in _LOADED:
            import verifiers as vf
            from verifiers.legacy.envs import environment

            with mock.patch.object(environment, "signal"):
                env = vf.load_environment(env_id, **json.loads(args))
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="rlvr-verifiers-loop", daemon=True).start()
            _LOADED[(env_id, args)] = env, loop
        return _LOADED[(env_id, args)]


def describe(env_id: str, args: str) -> dict[str, Any]:
    """In a worker: the environment's rubric functions and its rows, as plain data."""
    env, _ = _loaded(env_id, args)
    rubric = env.rubric
    names = rubric._get_reward_func_names()  # a RubricGroup's too (the functions of its rubrics)
    taken = sorted(set(names) & RESERVED)
    if taken:
        raise ValueError(
            f"its rubric's functions {taken} would replace rlvr's components of the same names; rename them"
        )
    grouped = [
        f.__name__ for f in rubric._get_reward_funcs() if hasattr(rubric, "_is_group_func") and rubric._is_group_func(f)
    ]
    if grouped:
        raise ValueError(
            f"its rubric scores whole groups ({', '.join(grouped)}), and rlvr runs its episodes one "
            "at a time: not built yet"
        )

    def rows(dataset) -> list[dict[str, Any]] | None:
        return None if dataset is None else [json.loads(json.dumps(dict(r), default=str)) for r in dataset]

    return {"components": names, "train": rows(env.get_dataset()), "eval": rows(env.build_eval_dataset())}


@functools.cache
def description(env_name: str, settings: str, python: str = "") -> dict[str, Any]:
    """The environment's rubric and rows, loaded in a harness worker (its import and load_environment
    are user code) that is then ended, or by env.python (a v1 environment). A failure is a config error
    naming the environment."""
    name = id_of(env_name)
    if python:
        return _v1_description(name, settings, python)
    worker = Worker("verifiers")
    try:
        return worker.submit(describe, name, settings).result(LOAD_TIMEOUT_S)
    except CallFailed as exc:
        raise ConfigError(
            f"env.name: verifiers environment {name!r} did not load ({exc.kind}): {exc.type_name}: "
            f"{exc.message} (env.settings are its load_environment arguments)"
        ) from None
    except TimeoutError:
        raise ConfigError(f"env.name: verifiers environment {name!r} did not load in {LOAD_TIMEOUT_S:g} s") from None
    finally:
        worker.kill()


V1_RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verifiers_v1.py")
V1_TIMEOUT_SHARE = 0.9
"""A v1 episode's own deadline, as a share of env.episode_timeout_s: verifiers ends it (its traces kept)
before rlvr would kill the worker, and every episode in it."""


def _v1_spec(env_cfg) -> str:
    timeout = env_cfg.episode_timeout_s * V1_TIMEOUT_SHARE
    return json.dumps({"id": id_of(env_cfg.name), "settings": env_cfg.settings, "episode_timeout_s": timeout})


def check_v1_settings(settings: dict[str, Any]) -> None:
    """env.settings of a v1 environment: its keys, and a runtime rlvr provides (rlvr.envs.verifiers_v1)."""
    from rlvr.envs.verifiers_v1 import RUNTIMES, SETTINGS

    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ConfigError(
            f"env.settings.{unknown[0]}: not a setting of a verifiers v1 environment ({', '.join(SETTINGS)})"
        )
    runtime = (settings.get("agent") or {}).get("runtime") or {"type": "subprocess"}
    if runtime.get("type") not in RUNTIMES:
        raise ConfigError(
            f"env.settings.agent.runtime.type={runtime.get('type')!r}: rlvr runs verifiers harnesses in the "
            "subprocess runtime only (a container or hosted sandbox runtime is not provided here)"
        )


def _v1_description(name: str, settings: str, python: str) -> dict[str, Any]:
    check_v1_settings(json.loads(settings))
    spec = json.dumps({"id": name, "settings": json.loads(settings)})
    try:
        done = subprocess.run(
            [python, V1_RUNNER, "describe", spec],
            capture_output=True,
            text=True,
            timeout=LOAD_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except OSError as exc:
        raise ConfigError(
            f"env.python: {python!r} did not start ({exc}); give the interpreter of a virtual environment with verifiers>=0.4"
        ) from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"env.name: verifiers environment {name!r} did not load in {LOAD_TIMEOUT_S:g} s") from None
    lines = done.stdout.strip().splitlines()
    try:
        said = json.loads(lines[-1])
    except (IndexError, ValueError):
        said = {"error": (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]}
    if "error" in said:
        raise ConfigError(
            f"env.name: verifiers environment {name!r} did not load with env.python={python}: {said['error']}"
        )
    found = said["ok"]
    names = [*found["rewards"], *found["metrics"]]
    taken = sorted(set(names) & RESERVED)
    if taken:
        raise ConfigError(
            f"env.name: {name!r}'s rewards or metrics {taken} would replace rlvr's components of the same names; rename them"
        )
    return {"components": names, "train": found["train"], "eval": None}


def _settings(env_cfg) -> str:
    return json.dumps(env_cfg.settings, sort_keys=True, default=str)


def _description(env_cfg) -> dict[str, Any]:
    return description(env_cfg.name, _settings(env_cfg), env_cfg.python)


def components(env_cfg) -> dict[str, float]:
    """The rubric's functions (a v1 environment's rewards and metrics) as components, weight 0 (their
    weighted sum is `correct`)."""
    return dict.fromkeys(_description(env_cfg)["components"], 0.0)


def program(env_cfg) -> Rollout:
    """What runs each episode of a classic environment (env.python unset)."""
    return Rollout(id_of(env_cfg.name), _settings(env_cfg))


def v1_argv(env_cfg) -> tuple[str, ...]:
    """The command that runs a v1 environment's episodes (env.python set), as long-lived processes
    (env.agent_protocol=lines)."""
    return (env_cfg.python, V1_RUNNER, "serve", _v1_spec(env_cfg))


def problems(env_cfg, chat: bool = True) -> tuple[list[Problem], list[Problem] | None]:
    """(training problems, held-out problems or None: drawn from the training rows). chat=False (a
    tokenizer without a chat template): prompts as their messages' text, as rlvr.agents.session
    renders a chat request for such a model."""
    found = _description(env_cfg)
    to_problems = functools.partial(_problems, id_of(env_cfg.name), chat)
    return to_problems(found["train"], "train"), None if found["eval"] is None else to_problems(found["eval"], "eval")


def _problems(name: str, chat: bool, rows: list[dict[str, Any]], split: str) -> list[Problem]:
    return [
        Problem(
            id=f"{name}/{split}/{r.get('example_id', i)}",
            prompt=_prompt(r.get("prompt"), chat),
            answer=None if r.get("answer") is None else str(r["answer"]),
            source=SOURCE,
            verifier="env",
            metadata={"verifiers_row": r},
        )
        for i, r in enumerate(rows)
    ]


def _prompt(prompt: Any, chat: bool) -> str | list[dict[str, Any]]:
    """What rlvr shows where it needs the prompt itself (samples, an episode that never asked); the
    rollout sends its own."""
    if isinstance(prompt, str):
        return prompt
    messages = [{"role": m.get("role", "user"), "content": m.get("content") or ""} for m in prompt or []]
    return messages if chat else "\n".join(str(m["content"]) for m in messages)
