"""The embedded driver, from the config: every part of a run built (rlvr.assembly.parts), then the
GRPO loop (rlvr.train.grpo) run over them. A Ray trainer runs it too, with its batches collected on
the actor pools (make_source).

    summary = train(cfg)                       # cold start, temperature, open_run, the steps, finish
    run, state = open_run(cfg, ui, None)        # the run's parts and its trainer state (resumed, or evaluated)
"""

from __future__ import annotations

import copy
import functools
import os
import time
from collections.abc import Callable
from pathlib import Path

from rlvr.assembly.parts import (
    episode_spec,
    metric_sinks,
    policy,
    reference_model,
    rollout_engine,
    rule_reward,
    run_guard,
    run_store,
    run_task,
    teacher_model,
)
from rlvr.assembly.start import auto_temperature, starting_point
from rlvr.checkpoint import Checkpointer, config_drift, config_fingerprint, resume_point
from rlvr.config import Config
from rlvr.configlib import ConfigError, RunFailed
from rlvr.console import RunConsole
from rlvr.envs.settings import check_env
from rlvr.evaluate import eval_metrics
from rlvr.inference.reward_models import with_learned_rewards  # reward.models, beside the rules
from rlvr.kernels import keep_freed_memory
from rlvr.ops.guard import Snapshot
from rlvr.rollout import sampling_params
from rlvr.runlog import RunLog
from rlvr.train.grpo import Run, check_speculation, run_steps
from rlvr.train.parallel import Parallel, train_device
from rlvr.train.sharded_checkpoint import ShardedCheckpointer
from rlvr.train.state import TrainerState, seed_everything
from rlvr.train.step import BatchSource, LocalBatches, RankZeroBatches
from rlvr.train.update import update_settings


def train(
    cfg: Config,
    ui: RunConsole | None = None,
    make_source: Callable[[RunLog], BatchSource] | None = None,
    start: Path | None = None,
) -> dict:
    """Run GRPO as configured; returns the summary (also in <run dir>/summary.json).
    make_source: called with the run log, returns where batches come from (the Ray backend's
    actors); None samples in this process. start: the policy RL starts from when the caller
    resolved it (the Ray driver); None: the cold start, run or found cached here."""
    check_env(cfg.env, cfg.task, cfg.algo, cfg.reward, cfg.sources)
    device = train_device(cfg.train.device)
    if device.type == "cuda" and cfg.rollout.speculative.method != "none" and cfg.rollout.engine != "vllm":
        raise ConfigError(
            "rollout.speculative: the loop engine's speculative decoding runs on the CPU only; on "
            "CUDA use rollout.engine=vllm (vLLM's methods, through the same fidelity check) or "
            "rollout.speculative.method=none"
        )
    if cfg.train.offload and device.type != "cuda":
        raise ConfigError(
            "train.offload: there is no GPU memory to offload from (train.device resolved to "
            f"{device.type}); leave train.offload=false"
        )
    par = Parallel.create(cfg.train, device)
    ui = ui or RunConsole(cfg.run.progress and par.main)
    keep_freed_memory()  # (the rlvr command has set it already; train() called from Python sets it here)
    threads = cfg.train.threads or (_cores_per_rank() if "LOCAL_WORLD_SIZE" in os.environ else 0)
    if threads:
        import torch

        torch.set_num_threads(threads)
    run = None
    try:
        picked, t_start = None, time.time()
        if make_source is None:  # (the Ray driver picks the temperature before its actors take the config)
            cfg, picked = auto_temperature(cfg, ui, functools.partial(starting_point, cfg, ui), par)
        run, state = open_run(cfg, ui, make_source, par, start)
        run.t_start = t_start  # the run's wall time counts the cold start and the measurement too
        if picked is not None:
            run.log.event("temperature_picked", **picked)
        return run_steps(run, state)
    except SystemExit as exc:  # a run that did not complete never exits 0, whoever called sys.exit
        raise RunFailed(
            f"sys.exit({exc.code!r}) was called by user code run in the trainer's process (a reward "
            "function, a tool or an environment with env.isolation=thread); the run did not "
            "complete"
        ) from exc
    finally:
        if run is not None:
            run.engine.episodes.host.shutdown()  # the environment workers end with the run
        par.close()


def _cores_per_rank() -> int:
    """The CPU cores shared out among the ranks torchrun started on this machine (LOCAL_WORLD_SIZE)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // int(os.environ["LOCAL_WORLD_SIZE"]))


def open_run(
    cfg: Config,
    ui: RunConsole,
    make_source: Callable[[RunLog], BatchSource] | None,
    par: Parallel | None = None,
    start: Path | None = None,
) -> tuple[Run, TrainerState]:
    """Run log, cold start, model, task, engine, batch source and the trainer state (resumed, or
    evaluated before RL). par: this rank of a trainer group (rank 0 writes the run directory, the
    others log under <run dir>/ranks/). start: the policy RL starts from, resolved by the caller
    (a Ray trainer: the driver's, shipped to its node); None: `starting_point` here."""
    par = par or Parallel()
    t_start = time.time()
    store = run_store(cfg, par.rank)  # run.dir at a URL: the local run directory is its cache
    uploads_cut = []
    if store is not None and cfg.ckpt.resume:
        if not par.main:
            par.barrier()  # rank 0 pulls first: ranks on one node share the cache
        uploads_cut = store.pull()
        if par.main:
            par.barrier()
    resume, unusable = resume_point(cfg.ckpt.resume, cfg.run_dir / "checkpoints")
    unusable = uploads_cut + unusable
    resume_step = resume.step if resume else None
    if par.main:
        log = RunLog(
            cfg.run_dir, cfg.to_dict(), sinks=metric_sinks(cfg, resume_step=resume_step, ui=ui), resume_step=resume_step
        )
    else:
        log = RunLog(cfg.run_dir / "ranks" / f"rank_{par.rank}", cfg.to_dict(), resume_step=resume_step)
    for problem in unusable:
        ui.warn(f"checkpoint {problem}; skipped in favour of an older one")
        log.event("checkpoint_skipped", problem=problem)
    guard = run_guard(cfg, log, ui)  # alert rules, rollback, fault injection
    source = make_source(log) if make_source else None
    if par.sharded and make_source is not None:  # batches from outside the group: rank 0's source serves all
        source = RankZeroBatches(source if par.main else None, par)
    start_path = start
    if start_path is None:
        if not par.main:
            par.barrier()  # rank 0 runs (or finds cached) the cold start first
        start_path = starting_point(cfg, ui)
        if par.main:
            par.barrier()
    # seeded after the cold start, which draws from the same generators when it is not cached yet:
    # the first run and every later one (SFT cached) sample the same
    seed_everything(cfg.seed, par.rank)
    for line in banner(cfg, start_path):
        ui.print(line)
    model, tokenizer = policy(
        cfg, start_path, par.device
    )  # dtype, checkpointing, LoRA; a resume loads its weights below
    trained = model
    if par.sharded:  # the engines (and the reference) keep full weights of their own; the policy is sharded
        model = copy.deepcopy(trained)
    reward = rule_reward(cfg)
    context = getattr(trained.config, "max_position_embeddings", None)  # a prompt must fit the model
    task = run_task(cfg, tokenizer=tokenizer, on_event=log.event, context=context)  # skipped/cut records -> events
    engines = {}  # engine name -> engine, so evaluation shares the rollout engine when they are the same
    episodes = episode_spec(cfg)  # one set of environment workers for both
    for name in (cfg.rollout.engine if source is None else None, cfg.eval.engine or cfg.rollout.engine):
        if name is not None and name not in engines:
            engines[name] = rollout_engine(
                cfg,
                model,
                tokenizer,
                name=name,
                model_dir=start_path,  # hf, loop: the policy's own weights
                episodes=episodes,
            )
    task_held_out = task.held_out()[: cfg.eval.n]
    if source is None:
        engine = engines[cfg.rollout.engine]
        if cfg.rollout.speculative.method != "none":
            check_speculation(cfg.rollout, cfg.model.dtype, engine, model, tokenizer, task_held_out, log)
        learned = with_learned_rewards(reward, cfg.reward, str(train_device(cfg.train.device)))
        # the reference and the teacher copy `model`: the policy's full weights (under FSDP the rank's unsharded copy)
        ref = reference_model(cfg, model, tokenizer) if cfg.algo.beta > 0 else None  # beta = 0 loads none at all
        teacher = teacher_model(cfg, tokenizer, next(model.parameters()).device) if cfg.algo.distill.teacher else None
        spec = cfg.rollout.speculative
        source = LocalBatches(
            engine,
            learned,
            ref,
            sampling_params(cfg.rollout),
            cfg.algo,
            cfg.rollout.batch_size,
            cfg.rollout.sync_every,
            spec if spec.method != "none" else None,
            log,
            par=par,
            credit=cfg.env.credit,
            teacher=teacher,
        )
    retention = dict(
        config_hash=config_fingerprint(cfg.to_dict()),
        keep=cfg.ckpt.keep,
        keep_best=cfg.ckpt.keep_best,
        best_mode=cfg.ckpt.best_mode,
    )
    checkpointer = (
        ShardedCheckpointer(cfg.run_dir / "checkpoints", par=par, store=store, **retention)
        if par.sharded
        else Checkpointer(
            cfg.run_dir / "checkpoints",
            async_write=cfg.ckpt.async_write,
            on_saved=store.push_checkpoint if store else None,
            **retention,
        )
    )
    settings = update_settings(cfg.algo, cfg.train, cfg.rollout, cfg.model.dtype)
    run = Run(
        ui,
        log,
        guard,
        tokenizer,
        engines[cfg.eval.engine or cfg.rollout.engine],
        reward,
        task_held_out,
        source,
        settings,
        checkpointer,
        start_path,
        t_start,
        par,
        model,
        algo=cfg.algo,
        eval=cfg.eval,
        ckpt=cfg.ckpt,
        logging=cfg.log,
        steps=cfg.train.steps,
        max_new_tokens=cfg.rollout.max_new_tokens,
        recompute=cfg.algo.recomputes(cfg.rollout.engine),
        run_dir=cfg.run_dir,
        seed=cfg.seed,
        config=cfg.to_dict(),
        store=store,
    )
    state = TrainerState.create(
        cfg.train,
        cfg.seed,
        cfg.reward.monitor.stuck_steps,
        par.shard(trained, offload=cfg.train.offload),
        task,
        guard,
        par,
    )
    if resume:
        state.restore(resume)
        changes = config_drift(resume, cfg.to_dict())
        log.event("resume", step=state.step, checkpoint=str(resume.path), config_changes=changes)
        ui.print(f"resumed from {resume.path} at step {state.step}")
        for change in changes:
            ui.warn(f"resuming with a changed setting: {change}")
    else:
        state.eval_before = ev = run.evaluate(state, run.held_out)
        log.metrics(0, eval_metrics(ev))
        ui.print(f"held-out accuracy before RL: {ev['accuracy']:.1%} (n={ev['n']}, greedy)")
        # the rollback target before any checkpoint
        guard.start = Snapshot(0, start_path, copy.deepcopy(state.state_dict(cfg.to_dict())))
    return run, state


def banner(cfg: Config, start_from: Path) -> list[str]:
    """What the run is, in four lines, before it starts."""
    r, a, t = cfg.rollout, cfg.algo, cfg.train
    return [
        f"[bold]rlvr train[/]  run dir [cyan]{cfg.run_dir}[/]",
        f"  model {cfg.model.name} from {start_from}  task {cfg.task.name}  seed {cfg.seed}",
        f"  {t.steps} steps x {r.batch_size} prompts x G={r.group_size}  T={r.temperature}"
        f"  max_new_tokens={r.max_new_tokens}  lr={t.lr}  mu={t.ppo_epochs}",
        f"  loss {a.loss_type}  advantage {a.advantage}/{a.scale}  clip [{a.clip_low}, {a.clip_high}]"
        f"  beta={a.beta}  backend {cfg.deploy.backend}",
    ]
