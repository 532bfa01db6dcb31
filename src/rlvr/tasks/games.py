"""Built-in game tasks for the gymnasium environments (rlvr.envs.gym): a problem is an episode's seed.

- `frozenlake`: a random 4x4 map per seed; held-out maps are never trained on. The prompt is the
  map with the agent as `x`. The teacher walks the shortest safe path, except that with probability
  sft.teacher_error it has a misconception: right along the top row, then down, holes or not.
- `breakout`: every episode starts from the same serve (ALE is deterministic), so the seeds differ in
  name only; the teacher moves the paddle under the ball, taking a random action with probability
  sft.teacher_error at each turn.
- `inverted_pendulum`: MuJoCo's cart and pole from a start drawn by the seed (held-out seeds never
  trained on); the teacher pushes the cart by the pole's angular velocity, to one decimal (a force
  that balances it on every seed), except that with probability sft.teacher_error it has a
  misconception for the whole episode: it pushes the other way, and the pole falls.

Demonstrations are trajectories of (text, sampled) segments, as the tool task's: the teacher's
actions and the environment's observations in between.
"""

from __future__ import annotations

import functools
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from rlvr.envs.gym import draw_lake, frozenlake_map
from rlvr.records import Problem

SOURCES = ("frozenlake", "breakout", "inverted_pendulum")
VERSION = 2
"""Bumped whenever what the prompts or demonstrations look like changes (cached cold starts are keyed by it)."""


def _problem(name: str, seed: int, split: str, prompt: str) -> Problem:
    return Problem(id=f"{split}:{name}:{seed}", prompt=prompt, source=name, verifier="env", metadata={"seed": seed})


# --- FrozenLake ----------------------------------------------------------------------------------

MOVES = {"L": (0, -1), "D": (1, 0), "R": (0, 1), "U": (-1, 0)}


def lake_map(seed: int) -> list[str]:
    return frozenlake_map(4, seed, 0.8)


def shortest_path(desc: list[str]) -> list[str]:
    """The moves of a shortest path from S to G that steps on no hole (breadth first)."""
    n = len(desc)
    goal = next((r, c) for r in range(n) for c in range(n) if desc[r][c] == "G")
    prev: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {(0, 0): None}
    queue = deque([(0, 0)])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            break
        for move, (dr, dc) in MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < n and 0 <= nxt[1] < n and nxt not in prev and desc[nxt[0]][nxt[1]] != "H":
                prev[nxt] = (cell, move)
                queue.append(nxt)
    moves, cell = [], goal
    while prev[cell] is not None:
        cell, move = prev[cell]  # type: ignore[misc]
        moves.append(move)
    return moves[::-1]


def lake_teacher(problem: Problem, error_rate: float, rng: random.Random) -> list[tuple[str, bool]]:
    desc = lake_map(problem.metadata["seed"])
    n = len(desc)
    moves = ["R"] * (n - 1) + ["D"] * (n - 1) if rng.random() < error_rate else shortest_path(desc)
    pos, out = (0, 0), []
    for move in moves:
        out.append((move, True))
        pos = (pos[0] + MOVES[move][0], pos[1] + MOVES[move][1])
        if desc[pos[0]][pos[1]] in "HG":  # fell in, or arrived: the episode is over
            break
        out.append((draw_lake(desc, pos), False))
    return out


@dataclass(frozen=True)
class FrozenLakeTask:
    eval_size: int = 300
    seed: int = 0

    @functools.cached_property
    def _held(self) -> list[int]:
        rng, seeds, maps = random.Random(f"lake-heldout-{self.seed}"), [], set()
        while len(seeds) < self.eval_size:
            s = rng.randrange(10**6, 2 * 10**6)
            key = "".join(lake_map(s))
            if key not in maps:
                maps.add(key)
                seeds.append(s)
        return seeds

    def held_out(self) -> list[Problem]:
        return [_problem("frozenlake", s, "eval", draw_lake(lake_map(s), (0, 0))) for s in self._held]

    def train_stream(self, seed: int) -> Iterator[Problem]:
        held = {"".join(lake_map(s)) for s in self._held}
        rng = random.Random(f"lake-train-{self.seed}-{seed}")
        while True:
            s = rng.randrange(10**6)
            desc = lake_map(s)
            if "".join(desc) not in held:
                yield _problem("frozenlake", s, "train", draw_lake(desc, (0, 0)))


# --- Breakout ------------------------------------------------------------------------------------


def _breakout(turns: int):
    from rlvr.envs.gym import Breakout  # gymnasium and ale-py: the optional rlvr[envs]

    return Breakout(max_turns=turns)


@functools.lru_cache(maxsize=1)
def breakout_start() -> str:
    env = _breakout(1)
    text = env.reset(Problem(id="start", prompt=""), 0)
    env.close()
    return text


def breakout_teacher(
    problem: Problem, error_rate: float, rng: random.Random, turns: int = 64
) -> list[tuple[str, bool]]:
    env = _breakout(turns)
    env.reset(problem, problem.metadata["seed"])
    out: list[tuple[str, bool]] = []
    try:
        for _ in range(turns):
            bx, _, px = env.positions(env.obs)
            move = "N" if abs(bx - px) < 6 else ("L" if bx < px else "R")
            if rng.random() < error_rate:
                move = rng.choice("LRN")
            out.append((move, True))
            result = env.step(move)
            if result.done:
                break
            out.append((result.messages[0]["content"], False))
    finally:
        env.close()
    if out and not out[-1][1]:
        out.pop()  # the turns ran out: the last observation is answered by no turn
    return out


@dataclass(frozen=True)
class BreakoutTask:
    eval_size: int = 32
    seed: int = 0

    def held_out(self) -> list[Problem]:
        return [_problem("breakout", 10**6 + k, "eval", breakout_start()) for k in range(self.eval_size)]

    def train_stream(self, seed: int) -> Iterator[Problem]:
        rng = random.Random(f"breakout-train-{self.seed}-{seed}")
        while True:
            yield _problem("breakout", rng.randrange(10**6), "train", breakout_start())


# --- InvertedPendulum ------------------------------------------------------------------------------


def _pendulum(turns: int):
    from rlvr.envs.control import InvertedPendulum  # gymnasium[mujoco]: the optional rlvr[envs]

    return InvertedPendulum(max_turns=turns)


def pendulum_start(seed: int) -> str:
    env = _pendulum(1)
    try:
        return env.reset(Problem(id="start", prompt=""), seed)
    finally:
        env.close()


def pendulum_teacher(
    problem: Problem, error_rate: float, rng: random.Random, turns: int = 40
) -> list[tuple[str, bool]]:
    env = _pendulum(turns)
    env.reset(problem, problem.metadata["seed"])
    wrong_way = rng.random() < error_rate
    out: list[tuple[str, bool]] = []
    try:
        for _ in range(turns):
            w = min(max(float(env.obs[3]), -3.0), 3.0)
            move = f"{-w if wrong_way else w:+.1f}"
            out.append((move, True))
            result = env.step(move)
            if result.done:
                break
            out.append((result.messages[0]["content"], False))
    finally:
        env.close()
    return out


@dataclass(frozen=True)
class PendulumTask:
    eval_size: int = 64
    seed: int = 0

    def held_out(self) -> list[Problem]:
        rng = random.Random(f"pendulum-heldout-{self.seed}")
        seeds = [rng.randrange(10**6, 2 * 10**6) for _ in range(self.eval_size)]
        return [_problem("inverted_pendulum", s, "eval", pendulum_start(s)) for s in seeds]

    def train_stream(self, seed: int) -> Iterator[Problem]:
        rng = random.Random(f"pendulum-train-{self.seed}-{seed}")
        while True:
            s = rng.randrange(10**6)
            yield _problem("inverted_pendulum", s, "train", pendulum_start(s))


TASKS = {"frozenlake": FrozenLakeTask, "breakout": BreakoutTask, "inverted_pendulum": PendulumTask}
TEACHERS = {"frozenlake": lake_teacher, "breakout": breakout_teacher, "inverted_pendulum": pendulum_teacher}


def teacher_solution(problem: Problem, error_rate: float, rng: random.Random) -> list[tuple[str, bool]]:
    return TEACHERS[problem.source](problem, error_rate, rng)
