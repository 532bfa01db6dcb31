"""Robot control as text episodes: gymnasium environments with continuous actions (MuJoCo).

    class MyArm(ContinuousGymEnv):              # any gymnasium.Env with a Box action space
        def make(self, seed): return gymnasium.make("Reacher-v5")
        def render(self, obs): return " ".join(f"{v:+.2f}" for v in obs) + "\\n"

Each assistant turn is one action: one number per action dimension, `[+-]digits[.digits]`, separated
by spaces (`+0.4`, `-1.5 +0.2`), each clipped to the action space's bounds. A turn that is not
exactly that (a word, a missing or extra number, `nan`) is the `invalid_action` component (-1) and
the environment takes the zero action (`parse_action`).

Built in (`pip install 'rlvr[envs]'`: gymnasium's MuJoCo environments and the `mujoco` wheel):
- `inverted_pendulum`: MuJoCo's InvertedPendulum-v5, a cart balancing a pole; the observation as
  `a<pole angle> w<angular velocity> x<cart position> v<cart velocity>` (two decimals), the action
  the force on the cart in [-3, 3]. Components: `balance` (dense: the environment's own +1 for each
  step the pole stays up, over env.max_turns, so a whole episode sums to 1), `success` (sparse: 1
  when the pole is still up after env.max_turns turns), `shaping` (potential-based on the pole's
  angle, Phi = -|angle| / 0.2, the angle at which the episode ends) and `invalid_action`.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr.envs import StepResult, register_env
from rlvr.envs.gym import GymEnv, _gym
from rlvr.records import Problem

_NUMBER = r"[+-]?[0-9]{1,6}(?:\.[0-9]{1,6})?"  # ASCII digits: float() reads other scripts' too


def parse_action(text: str, low: Any, high: Any) -> list[float] | None:
    """The action a turn writes: len(low) numbers `[+-]digits[.digits]` separated by spaces, each
    clipped to [low, high]; None when the turn is anything else."""
    t = text.strip()
    if not re.fullmatch(rf"{_NUMBER}(?: +{_NUMBER})*", t):
        return None
    values = [float(v) for v in t.split()]
    if len(values) != len(low):
        return None
    return [min(max(v, float(lo)), float(hi)) for v, lo, hi in zip(values, low, high)]


class ContinuousGymEnv(GymEnv):
    """Adapter for a gymnasium.Env with a Box action space: override make and render (and potential)."""

    def parse(self, text: str) -> Any:
        import numpy as np

        space = self.env.action_space
        action = parse_action(text, space.low, space.high)
        return None if action is None else np.asarray(action, dtype=space.dtype)

    @property
    def default_action(self) -> Any:  # type: ignore[override]  # the zero action: nothing done
        import numpy as np

        return np.zeros(self.env.action_space.shape, dtype=self.env.action_space.dtype)


@register_env("inverted_pendulum")
class InvertedPendulum(ContinuousGymEnv):
    """MuJoCo's InvertedPendulum-v5: keep the pole up for env.max_turns turns (0.04 s each)."""

    components = {"balance": 1.0, "success": 1.0, "shaping": 0.1, "invalid_action": 0.1}
    max_turns = 40
    settings_keys = frozenset()  # the task's teacher plays this environment as it is
    FALL = 0.2  # |pole angle| in radians at which gymnasium ends the episode

    def make(self, seed: int) -> Any:
        return _gym().make("InvertedPendulum-v5")

    def reset(self, problem: Problem, seed: int) -> str:
        self.turns = int(self.context.get("max_turns", self.max_turns))
        self.steps = 0
        return super().reset(problem, seed)

    def render(self, obs: Any) -> str:
        x, angle, v, w = (float(o) for o in obs)
        return f"a{angle:+.2f} w{w:+.2f} x{x:+.2f} v{v:+.2f}\n"

    def potential(self, obs: Any) -> float:
        return -min(abs(float(obs[1])) / self.FALL, 1.0)

    def step(self, assistant_turn: str) -> StepResult:
        action = self.parse(assistant_turn)
        before = self.potential(self.obs)
        obs, reward, terminated, truncated, _ = self.env.step(self.default_action if action is None else action)
        self.obs, self.total, self.steps = obs, self.total + float(reward), self.steps + 1
        self.success = not terminated and self.steps >= self.turns
        components = {
            "balance": float(reward) / self.turns,
            "success": 1.0 if self.success else 0.0,
            "shaping": self.potential(obs) - before,
            "invalid_action": -1.0 if action is None else 0.0,
        }
        done = bool(terminated or truncated or self.steps >= self.turns)
        return StepResult(
            None if done else [{"role": "user", "content": self.render(obs)}],
            components,
            done,
            {"success": self.success, "return": self.total},
        )
