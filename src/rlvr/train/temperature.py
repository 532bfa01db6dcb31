"""The sampling temperature, picked before RL where it is asked for (rollout.auto_temperature).

After a cold start the policy is sharp: at the configured temperature a prompt's G samples often
agree, and a group whose rewards are all equal gives GRPO no signal; the few groups left steer each
update and held-out accuracy can fall (docs/benchmarks.md, "Cold start on data files"). Before the
first step `pick` samples the first rollout.auto_temperature.prompts training problems G times at
rollout.temperature, then at each higher temperature in steps of `step` up to `max`, and keeps the
first at which at least `target` of the groups have reward variance (else the one with the most).
The run then uses it everywhere a temperature is read (sampling, the update's and the reference's
log-probs); its config.yaml records it and events.jsonl the measurements (`temperature_picked`).
rlvr.assembly.auto_temperature builds the probe from the config. Each measurement is seeded; the
run's own random streams are seeded after them, so a run whose temperature stays is exactly the run
it would have been without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr.config import AlgoConfig, AutoTemperatureConfig
from rlvr.console import RunConsole
from rlvr.records import Problem
from rlvr.rewards import Scorer
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.train.sft import sft_info
from rlvr.train.step import group_signal


@dataclass(frozen=True)
class Probe:
    """One temperature measured: the fraction of groups with reward variance and the mean reward."""

    temperature: float
    signal: float
    reward: float


def temperatures(start: float, step: float, top: float) -> list[float]:
    """start, then each higher temperature in steps of `step` up to `top` (start alone when it is above)."""
    out = [start]
    while out[-1] + step <= top + 1e-9:
        out.append(round(out[-1] + step, 6))
    return out


def search(
    start: float, auto: AutoTemperatureConfig, measure: Callable[[float], tuple[float, float]]
) -> tuple[float, list[Probe]]:
    """The temperature to use and the probes measured: the first reaching auto.target, else the one
    with the most groups with variance (the lowest of equals). measure(t) -> (signal, mean reward)."""
    probes = []
    for t in temperatures(start, auto.step, auto.max):
        probes.append(Probe(t, *measure(t)))
        if probes[-1].signal >= auto.target:
            return t, probes
    best = max(probes, key=lambda p: (p.signal, -p.temperature))
    return best.temperature, probes


def applies(auto: AutoTemperatureConfig, start_path: Path) -> bool:
    return auto.when == "always" or (auto.when == "cold_start" and sft_info(start_path) is not None)


@dataclass
class PolicyProbe:
    """Measures a temperature: `problems` sampled G times by `engine` at it, each probe from `seed`,
    and scored by `reward` (the rules: learned reward components are not loaded for it)."""

    engine: RolloutEngine
    problems: list[Problem]
    reward: Scorer
    params: SamplingParams
    algo: AlgoConfig
    seed: int

    def __call__(self, t: float) -> tuple[float, float]:
        torch.manual_seed(self.seed)
        params = dataclasses.replace(self.params, temperature=t)
        return group_signal(self.engine, self.problems, self.reward, params, self.algo)

    def close(self) -> None:
        self.engine.episodes.host.shutdown()
        self.reward.close()


def pick(probe: PolicyProbe, start: float, auto: AutoTemperatureConfig, ui: RunConsole) -> dict:
    """Measure with `probe` from `start` (section rollout.auto_temperature: `search`), say what each
    temperature gave, close the probe; the `temperature_picked` event's fields."""
    try:
        t, probes = search(start, auto, probe)
    finally:
        probe.close()
    for p in probes:
        ui.print(f"  T={p.temperature:g}: {p.signal:.0%} of groups with variance, mean reward {p.reward:.3f}")
    ui.print(f"rollout.temperature={t:g}")
    return {
        "temperature": t,
        "configured": start,
        "target": auto.target,
        "probes": [dataclasses.asdict(p) for p in probes],
    }
