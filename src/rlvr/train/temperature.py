"""The sampling temperature, picked before RL where it is asked for (rollout.auto_temperature).

After a cold start the policy is sharp: at the configured temperature a prompt's G samples often
agree, and a group whose rewards are all equal gives GRPO no signal; the few groups left steer each
update and held-out accuracy can fall (docs/benchmarks.md, "Cold start on data files"). Before the
first step `auto_temperature` samples the first rollout.auto_temperature.prompts training problems
G times at rollout.temperature, then at each higher temperature in steps of `step` up to `max`, and
keeps the first at which at least `target` of the groups have reward variance (else the one with
the most). The run then uses it everywhere a temperature is read (sampling, the update's and the
reference's log-probs); its config.yaml records it and events.jsonl the measurements
(`temperature_picked`). Each measurement is seeded; the run's own random streams are seeded after
them, so a run whose temperature stays is exactly the run it would have been without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr.assembly import episode_spec, rollout_engine, rule_reward, run_task
from rlvr.config import AlgoConfig, AutoTemperatureConfig, Config
from rlvr.console import RunConsole
from rlvr.models import load_policy
from rlvr.records import Problem
from rlvr.rewards import Scorer
from rlvr.rollout import RolloutEngine, SamplingParams, sampling_params
from rlvr.tasks import ProblemSampler
from rlvr.train.parallel import Parallel, train_device
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


def search(start: float, auto: AutoTemperatureConfig, measure: Callable[[float], tuple[float, float]]
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


def auto_temperature(cfg: Config, ui: RunConsole, start: Callable[[], Path], par: Parallel | None = None
                     ) -> tuple[Config, dict | None]:
    """cfg with rollout.temperature picked and the `temperature_picked` event's fields; cfg itself and
    None where rollout.auto_temperature does not apply. start() -> the policy RL starts from (called
    on rank 0, which measures; every rank of a trainer group gets its choice)."""
    par = par or Parallel()
    auto = cfg.rollout.auto_temperature
    if auto.when == "never":
        return cfg, None
    picked = None
    start_path = start() if par.main else None
    if par.main and applies(auto, start_path):
        ui.print(f"picking the sampling temperature: the first from {cfg.rollout.temperature:g} up to {auto.max:g} "
                 f"with reward variance in {auto.target:.0%} of {auto.prompts} groups")
        # the run's first training problems, sampled by the policy at start_path the way rollout.engine
        # samples where it runs in this process (loop, else transformers' generate)
        model, tokenizer = load_policy(cfg.model, start_path, device=train_device(cfg.train.device))
        problems = ProblemSampler(run_task(cfg, tokenizer=tokenizer), seed=cfg.seed).take(auto.prompts)
        reward = rule_reward(cfg)
        engine = rollout_engine(cfg, model, tokenizer, name="loop" if cfg.rollout.engine == "loop" else "hf",
                                model_dir=start_path, episodes=episode_spec(cfg))
        probe = PolicyProbe(engine, problems, reward, sampling_params(cfg.rollout), cfg.algo, cfg.seed)
        try:
            t, probes = search(cfg.rollout.temperature, auto, probe)
        finally:
            probe.close()
        for p in probes:
            ui.print(f"  T={p.temperature:g}: {p.signal:.0%} of groups with variance, mean reward {p.reward:.3f}")
        ui.print(f"rollout.temperature={t:g}")
        picked = {"temperature": t, "configured": cfg.rollout.temperature, "target": auto.target,
                  "probes": [dataclasses.asdict(p) for p in probes]}
    picked = par.broadcast(picked)
    if picked is None:
        return cfg, None
    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, temperature=picked["temperature"])), picked
