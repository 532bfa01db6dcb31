"""gymnasium environments as text episodes: an adapter, FrozenLake and Breakout.

    class MyGame(GymEnv):                      # any gymnasium.Env, given a renderer and an action parser
        def make(self, seed): return gymnasium.make("CartPole-v1")
        def render(self, obs): return f"x={obs[0]:.1f}\\n"
        def parse(self, text): return {"L": 0, "R": 1}.get(text.strip()[:1])

Each assistant turn is one action. The reward components: `env` (the environment's own reward),
`invalid_action` (-1 when the turn is not an action: the environment then takes `default_action`),
and `shaping` when `potential(obs)` is defined: potential-based, Phi(s') - Phi(s), which keeps the
optimal policy (Ng et al. 1999). Each is weighted by reward.weights (defaults in `components`)
and logged as reward/<name>/mean. `info["success"]` and `info["return"]` say how the episode went
(verifier 'env', evaluation).

Built in (`pip install 'rlvr[envs]'`: gymnasium, and ale-py whose wheel ships the Atari ROMs):
- `frozenlake`: FrozenLake-v1, deterministic (is_slippery=False), a random map per problem seed;
  the map is drawn each turn with the agent as `x`, and the cells right of and below it on a last
  line; actions L D R U. Success: reaching the goal.
- `breakout`: ALE Breakout from RAM (ball x, y and paddle x, in 8-pixel cells), one ball per
  episode; actions L R N. Components: `brick` (the game's points, sparse) and `paddle` (dense:
  1 - |ball x - paddle centre| / screen width, averaged over the episode's turns), as in the
  source's robot-control reward.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from typing import Any, ClassVar

from rlvr.envs import Environment, StepResult, register_env
from rlvr.records import Problem


def _gym():
    try:
        import gymnasium
    except ImportError as exc:
        raise ImportError("gymnasium environments need gymnasium: pip install 'rlvr[envs]'") from exc
    return gymnasium


class GymEnv(Environment):
    """Adapter for a gymnasium.Env: override make, render and parse (and potential for shaping)."""

    components: ClassVar[dict[str, float]] = {"env": 1.0, "invalid_action": 0.1}
    default_action: ClassVar[int] = 0

    def __init__(self, settings: dict[str, Any] | None = None, **context: Any) -> None:
        super().__init__(settings, **context)
        self.env: Any = None
        self.obs: Any = None
        self.total = 0.0
        self.success = False

    @abstractmethod
    def make(self, seed: int) -> Any:
        """The gymnasium environment of the episode with this seed."""

    @abstractmethod
    def render(self, obs: Any) -> str:
        """The observation as text."""

    @abstractmethod
    def parse(self, text: str) -> int | None:
        """The action a turn names, or None when it names none."""

    def potential(self, obs: Any) -> float | None:
        """Phi(s) for potential-based shaping; None: no `shaping` component."""
        return None

    def succeeded(self, obs: Any, reward: float, terminated: bool) -> bool:
        return reward > 0

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None

    def reset(self, problem: Problem, seed: int) -> str:
        self.env = self.make(seed)
        self.obs, _ = self.env.reset(seed=seed)
        return self.render(self.obs)

    def step(self, assistant_turn: str) -> StepResult:
        action = self.parse(assistant_turn)
        components = {"invalid_action": -1.0 if action is None else 0.0}
        before = self.potential(self.obs)
        obs, reward, terminated, truncated, info = self.env.step(self.default_action if action is None else action)
        after = self.potential(obs)
        if before is not None and after is not None:
            components["shaping"] = after - before
        components["env"] = float(reward)
        self.obs, self.total = obs, self.total + float(reward)
        self.success = self.success or self.succeeded(obs, float(reward), terminated)
        done = bool(terminated or truncated)
        return StepResult(
            None if done else [{"role": "user", "content": self.render(obs)}],
            components,
            done,
            {"success": self.success, "return": self.total},
        )


def frozenlake_map(size: int, seed: int, p: float) -> list[str]:
    """gymnasium's random FrozenLake map of this seed (with a path from S to G)."""
    _gym()
    from gymnasium.envs.toy_text.frozen_lake import generate_random_map

    return generate_random_map(size=size, p=p, seed=seed)


def draw_lake(desc: list[str], pos: tuple[int, int]) -> str:
    """The map with the agent as `x`, then what is right of and below it (`#`: the edge)."""
    rows = [list(r) for r in desc]
    rows[pos[0]][pos[1]] = "x"
    n = len(desc)
    right = desc[pos[0]][pos[1] + 1] if pos[1] + 1 < n else "#"
    down = desc[pos[0] + 1][pos[1]] if pos[0] + 1 < n else "#"
    return "\n".join("".join(r) for r in rows) + f"\n{right}{down}\n"


@register_env("frozenlake")
class FrozenLake(GymEnv):
    """FrozenLake-v1 on a random map per seed, drawn with the agent as `x` after every move."""

    components = {"env": 1.0, "invalid_action": 0.1, "shaping": 0.1}
    max_turns = 12
    settings_keys = frozenset()  # 4x4 maps, 80% frozen: what the task's problems and teacher draw
    ACTIONS = {"L": 0, "D": 1, "R": 2, "U": 3}

    def make(self, seed: int) -> Any:
        self.desc = frozenlake_map(4, seed, 0.8)
        return _gym().make("FrozenLake-v1", desc=self.desc, is_slippery=False)

    def render(self, obs: Any) -> str:
        return draw_lake(self.desc, divmod(int(obs), len(self.desc)))

    def parse(self, text: str) -> int | None:
        t = text.strip()
        return self.ACTIONS.get(t[:1].upper()) if len(t) == 1 else None

    def potential(self, obs: Any) -> float:
        """Minus the Manhattan distance to the goal, over the largest one."""
        size = len(self.desc)
        r, c = divmod(int(obs), size)
        return -((size - 1 - r) + (size - 1 - c)) / (2 * (size - 1))


_ALE_LOCK = threading.Lock()
_ALE_FREE: list[Any] = []  # emulators of finished episodes, reused: making one takes a quarter second


@register_env("breakout")
class Breakout(GymEnv):
    """ALE Breakout from RAM, one ball per episode (the episode ends when it is lost)."""

    components = {"brick": 1.0, "paddle": 0.5, "invalid_action": 0.1}
    max_turns = 64
    settings_keys = frozenset()  # frame skip 4: what the task's teacher plays
    ACTIONS = {"N": 0, "R": 2, "L": 3}
    CELL = 8
    WIDTH = 144  # the paddle's and the ball's horizontal range in pixels

    def make(self, seed: int) -> Any:
        gym = _gym()
        skip = 4
        with _ALE_LOCK:  # registering and loading the ROM is not thread-safe
            for k, env in enumerate(_ALE_FREE):
                if env.unwrapped._frameskip == skip:
                    return _ALE_FREE.pop(k)
            import ale_py

            gym.register_envs(ale_py)
            return gym.make(
                "ALE/Breakout-v5",
                obs_type="ram",
                frameskip=skip,
                repeat_action_probability=0.0,
                full_action_space=False,
            )

    def close(self) -> None:
        if self.env is not None:
            with _ALE_LOCK:
                _ALE_FREE.append(self.env)
            self.env = None

    def reset(self, problem: Problem, seed: int) -> str:
        self.env = self.make(seed)
        self.env.reset(seed=seed)
        self.obs, _, _, _, info = self.env.step(1)  # FIRE: the ball is served
        self.lives = info["lives"]
        self.turns = int(self.context.get("max_turns", self.max_turns))
        return self.render(self.obs)

    @staticmethod
    def positions(ram: Any) -> tuple[int, int, int]:
        """(ball x, ball y, paddle centre x) in pixels, from RAM bytes 99, 101 and 72."""
        return int(ram[99]), int(ram[101]), int(ram[72]) + 8

    def render(self, ram: Any) -> str:
        bx, by, px = self.positions(ram)
        return f"b{bx // self.CELL},{by // self.CELL}p{px // self.CELL}\n"

    def parse(self, text: str) -> int | None:
        t = text.strip()
        return self.ACTIONS.get(t[:1].upper()) if len(t) == 1 else None

    def step(self, assistant_turn: str) -> StepResult:
        action = self.parse(assistant_turn)
        ram, reward, terminated, truncated, info = self.env.step(self.default_action if action is None else action)
        bx, _, px = self.positions(ram)
        lost = info["lives"] < self.lives
        self.obs, self.total = ram, self.total + float(reward)
        self.success = self.total > 0
        components = {
            "brick": float(reward),
            "invalid_action": -1.0 if action is None else 0.0,
            "paddle": max(0.0, 1.0 - abs(bx - px) / self.WIDTH) / self.turns,
        }
        done = bool(terminated or truncated or lost)
        return StepResult(
            None if done else [{"role": "user", "content": self.render(ram)}],
            components,
            done,
            {"success": self.success, "return": self.total},
        )
