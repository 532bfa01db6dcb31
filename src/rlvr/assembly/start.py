"""Where a run starts, from its config: the weights RL starts from (model.init_from, the base model
or the cold start), the cold start itself (rlvr.train.sft), and the sampling temperature picked
before the first step (rlvr.train.temperature).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from rlvr.assembly.parts import (
    base_model_path,
    cold_start_dir,
    cold_start_url,
    episode_spec,
    policy,
    rollout_engine,
    rule_reward,
    run_task,
)
from rlvr.config import Config
from rlvr.configlib import ConfigError
from rlvr.console import RunConsole
from rlvr.models.loading import load_tokenizer
from rlvr.rollout import sampling_params
from rlvr.tasks import VERIFIERS, ProblemSampler, data_paths
from rlvr.train.parallel import Parallel, train_device
from rlvr.train.sft import cached, cold_start, demonstrations, describe, sft_info
from rlvr.train.temperature import PolicyProbe, applies, pick

log = logging.getLogger("rlvr.sft")


def starting_point(cfg: Config, ui: RunConsole) -> Path:
    """The policy RL starts from: model.init_from, or the (cached) cold-start SFT checkpoint."""
    if cfg.model.init_from:
        return Path(cfg.model.init_from)
    if cfg.sft.steps == 0:
        return base_model_path(cfg)
    if not (cold_start_dir(cfg) / "sft.json").exists():  # (a cached one: the banner names it)
        ui.print(f"cold-start SFT: {cfg.sft.steps} steps (cached after the first run)")
    path = run_sft(cfg)
    if path is None:
        ui.print(
            "cold-start SFT skipped: no training record carries a worked solution (a `solution` field, or "
            "chat messages ending with an assistant turn); RL starts from the base model"
        )
        return base_model_path(cfg)
    info = sft_info(path)
    if info and "without_solution" in info:
        ui.print(f"cold-start SFT on {describe(info)}")
    return path


def run_sft(
    cfg: Config, out_dir: Path | None = None, on_step: Callable[[int, float], None] | None = None
) -> Path | None:
    """Train the cold-start checkpoint (or reuse the cached one) and return its directory; None when
    the data files carry no worked solution to imitate (RL then starts from the base model)."""
    if data_paths(cfg.task, cfg.data) and "sft.teacher_error" in cfg.sources:
        raise ConfigError(
            "sft.teacher_error: the built-in tasks' teacher; with data files the demonstrations are "
            "the records' own solutions: remove the key"
        )
    out = Path(out_dir) if out_dir else cold_start_dir(cfg)
    remote = cold_start_url(cfg) if out_dir is None else None
    found = cached(out, remote)
    if found is not None:
        return found
    base = base_model_path(cfg)
    task = run_task(cfg, tokenizer=load_tokenizer(base))  # data files: the prompt-length policy as the run applies it
    if cfg.task.name == VERIFIERS:  # an environment's rows carry no worked solution
        problems, solutions, counts = [], [], {"examples": 0}
    else:
        from_files = bool(data_paths(cfg.task, cfg.data))
        problems, solutions, counts = demonstrations(task, cfg.sft, cfg.seed, from_files=from_files)
    if counts.get("without_solution"):
        log.warning("cold-start SFT: %s", describe(counts))
    if not problems:
        log.warning(
            "cold-start SFT skipped: no training record of %s carries a worked solution",
            ", ".join(data_paths(cfg.task, cfg.data)) or cfg.env.name,
        )
        return None
    return cold_start(
        base,
        problems,
        solutions,
        counts,
        cfg.sft,
        out=out,
        remote=remote,
        seed=cfg.seed,
        history=cfg.env.history,
        device=train_device(cfg.train.device),
        dtype=cfg.model.dtype,
        on_step=on_step,
    )


def auto_temperature(
    cfg: Config, ui: RunConsole, start: Callable[[], Path], par: Parallel | None = None
) -> tuple[Config, dict | None]:
    """cfg with rollout.temperature picked (rlvr.train.temperature) and the `temperature_picked`
    event's fields; cfg itself and None where rollout.auto_temperature does not apply. start() -> the
    policy RL starts from (called on rank 0, which measures; every rank of a trainer group gets its
    choice)."""
    par = par or Parallel()
    auto = cfg.rollout.auto_temperature
    if auto.when == "never":
        return cfg, None
    picked = None
    start_path = start() if par.main else None
    if par.main and applies(auto, start_path):
        ui.print(
            f"picking the sampling temperature: the first from {cfg.rollout.temperature:g} up to {auto.max:g} "
            f"with reward variance in {auto.target:.0%} of {auto.prompts} groups"
        )
        # the run's first training problems, sampled by the policy at start_path the way rollout.engine
        # samples where it runs in this process (loop, else transformers' generate)
        model, tokenizer = policy(cfg, start_path, train_device(cfg.train.device))
        problems = ProblemSampler(run_task(cfg, tokenizer=tokenizer), seed=cfg.seed).take(auto.prompts)
        reward = rule_reward(cfg)
        engine = rollout_engine(
            cfg,
            model,
            tokenizer,
            name="loop" if cfg.rollout.engine == "loop" else "hf",
            model_dir=start_path,
            episodes=episode_spec(cfg),
        )
        probe = PolicyProbe(engine, problems, reward, sampling_params(cfg.rollout), cfg.algo, cfg.seed)
        picked = pick(probe, cfg.rollout.temperature, auto, ui)
    picked = par.broadcast(picked)
    if picked is None:
        return cfg, None
    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, temperature=picked["temperature"])), picked
