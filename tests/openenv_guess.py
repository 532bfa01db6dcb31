"""A number-guessing environment written with OpenEnv's public API (openenv-core), as its users write one."""

from __future__ import annotations

import random
import re
import uuid
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State
from pydantic import Field


class GuessAction(Action):
    text: str = Field(..., description="the player's turn; its first integer is the guess")


class GuessObservation(Observation):
    prompt: str = ""


class GuessEnv(Environment[GuessAction, GuessObservation, State]):
    def __init__(self) -> None:
        super().__init__()
        self._state, self._target = State(episode_id=None, step_count=0), 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> GuessObservation:
        self._target = random.Random(seed).randint(1, 10)
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return GuessObservation(prompt="Guess a number from 1 to 10.")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kw: Any) -> GuessObservation:
        self._state.step_count += 1
        m = re.search(r"-?\d+", action.text)
        guess = int(m.group()) if m else None
        if guess == self._target:
            return GuessObservation(prompt="Correct!", reward=1.0, done=True)
        hint = "say a number" if guess is None else ("higher" if guess < self._target else "lower")
        return GuessObservation(prompt=hint, reward=0.0, done=self._state.step_count >= 4)

    @property
    def state(self) -> State:
        return self._state


class WideGuessEnv(GuessEnv):
    """Constructor arguments of its own, and a reset that takes no seed (it draws from its own)."""

    def __init__(self, high: int, rng_seed: int) -> None:
        super().__init__()
        self.high, self.rng = high, random.Random(rng_seed)

    def reset(self) -> GuessObservation:  # type: ignore[override]
        self._target = self.rng.randint(1, self.high)
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)
        return GuessObservation(prompt=f"Guess a number from 1 to {self.high}.")


class TwoTexts(Action):
    """An action with two text fields: which one a turn fills must be said (env.settings.text_field)."""

    text: str = ""
    note: str = ""
