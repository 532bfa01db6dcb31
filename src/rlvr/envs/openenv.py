"""OpenEnv environments (Meta's `openenv-core`) as text episodes, in process, no container.

    env.name=openenv env.settings.environment=mypkg.guess:GuessEnv env.settings.action=mypkg.guess:GuessAction
    env.settings.args='{high: 100}'     # the environment's constructor arguments, if it takes any

An OpenEnv environment is a class (built with `env.settings.args` as keyword arguments) with
`reset()` (given the episode's `seed` when it takes one), `step(action)` and `state` whose
observations carry `done`, `reward` and fields of their own; its actions are pydantic models. The
adapter builds the action from the policy's turn (its text in the action's one text field, or
`env.settings.text_field`), shows the observation's own fields as the next user message (one field's
value as it is; several as `name: value` lines; `env.settings.observation_field` picks one), and
sums the observations' rewards as the `env` component (the episode's return; success: a positive
return). The environment is user code: it runs in env.isolation's worker processes like any
environment of your own. OpenEnv's HTTP and WebSocket servers and its Docker providers are not used
(each episode is one instance, stepped in place: what OpenEnv's in-process path does).
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from rlvr.configlib import ConfigError, import_object
from rlvr.envs import Environment, StepResult, register_env
from rlvr.records import Problem

_HIDDEN = {"done", "reward", "metadata"}


@register_env("openenv")
class OpenEnv(Environment):
    components: ClassVar[dict[str, float]] = {"env": 1.0}
    max_turns = 8
    settings_keys = frozenset({"environment", "action", "args", "text_field", "observation_field"})
    hosts_user_code = True

    def __init__(self, settings: dict[str, Any] | None = None, **context: Any) -> None:
        super().__init__(settings, **context)
        for key in ("environment", "action"):
            if not isinstance(self.settings.get(key), str):
                raise ConfigError(
                    f"env.settings.{key}: env.name=openenv needs the OpenEnv {key} class as 'module:Class'"
                )
        args = self.settings.get("args") or {}
        if not isinstance(args, dict):
            raise ConfigError(f"env.settings.args: the environment's constructor arguments as a mapping, got {args!r}")
        self.env = import_object(self.settings["environment"], "env.settings.environment")(**args)
        try:
            params = inspect.signature(self.env.reset).parameters.values()
            self.seeded = any(p.name == "seed" or p.kind is p.VAR_KEYWORD for p in params)
        except (TypeError, ValueError):  # a reset without a signature to read: OpenEnv's own takes a seed
            self.seeded = True
        self.action = import_object(self.settings["action"], "env.settings.action")
        self.text_field = self.settings.get("text_field") or _text_field(self.action)
        self.total = 0.0

    def reset(self, problem: Problem, seed: int) -> str:
        return self._show(self.env.reset(seed=seed) if self.seeded else self.env.reset())

    def step(self, assistant_turn: str) -> StepResult:
        obs = self.env.step(self.action(**{self.text_field: assistant_turn}))
        reward = float(obs.reward or 0.0)
        self.total += reward
        done = bool(obs.done)
        info = {"return": self.total, "success": self.total > 0} if done else {}
        return StepResult(None if done else [{"role": "user", "content": self._show(obs)}], {"env": reward}, done, info)

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()

    def _show(self, obs: Any) -> str:
        fields = {k: v for k, v in obs.model_dump().items() if k not in _HIDDEN}
        name = self.settings.get("observation_field")
        if name:
            return str(fields[name])
        if len(fields) == 1:
            return str(next(iter(fields.values())))
        return "\n".join(f"{k}: {v}" for k, v in fields.items())


def _text_field(action: type) -> str:
    """The action's one text field (besides metadata), or a config error asking which."""
    names = [n for n, f in getattr(action, "model_fields", {}).items() if n != "metadata" and f.annotation is str]
    if len(names) != 1:
        raise ConfigError(
            f"env.settings.text_field: {action.__name__} has {len(names)} text fields "
            f"({', '.join(names) or 'none'}); name the one the policy's turn fills"
        )
    return names[0]
