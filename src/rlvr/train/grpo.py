"""The GRPO driver: sample -> generate -> reward -> advantage -> update -> log -> checkpoint.

Everything with detail lives in named modules; this file reads as the
algorithm. `Run` holds what a run fixes at the start, `TrainerState` what its
steps change; `train_step` is one step, `finish` ends a run that completed or
failed. Batches come from a `BatchSource`: in this process (embedded), or from
the Ray actors (rlvr.deploy.ray.source).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlvr.assembly import (base_model_path, cold_start_dir, episode_spec, metric_sinks, reference_model, rollout_engine,
                           rule_reward, run_guard, run_store, run_task, teacher_model)
from rlvr.checkpoint import Checkpointer, check_loaded_keys, config_drift, config_fingerprint, resume_point
from rlvr.config import Config, RolloutConfig
from rlvr.configlib import ConfigError, RunFailed
from rlvr.console import RunConsole
from rlvr.envs.settings import check_env
from rlvr.evaluate import Evaluation, eval_metrics, evaluate
from rlvr.inference.reward_models import with_learned_rewards  # reward.models, beside the rules
from rlvr.kernels import keep_freed_memory
from rlvr.models import export_model, load_policy
from rlvr.ops.guard import RunDiverged, RunGuard, Snapshot
from rlvr.ops.report import recommended_length, write_report_safely
from rlvr.records import Problem
from rlvr.rewards import Scorer
from rlvr.rollout import HFEngine, RolloutEngine, sampling_params
from rlvr.rollout.speculative import check_speculative
from rlvr.runlog import RunLog, read_jsonl
from rlvr.stats import paired_report
from rlvr.storage import RunStore
from rlvr.train.memory import peak_memory, reset_peak_memory
from rlvr.train.parallel import Parallel, train_device
from rlvr.train.sft import describe, run_sft, sft_info
from rlvr.train.sharded_checkpoint import ShardedCheckpointer
from rlvr.train.state import TrainerState, seed_everything
from rlvr.train.step import BatchSource, LocalBatches, RankZeroBatches, StepBatch
from rlvr.train.sync import Synced, sync_weights
from rlvr.train.temperature import auto_temperature
from rlvr.train.update import UpdateSettings, policy_update, recompute_anchor, update_settings


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
        ui.print("cold-start SFT skipped: no training record carries a worked solution (a `solution` field, or "
                 "chat messages ending with an assistant turn); RL starts from the base model")
        return base_model_path(cfg)
    info = sft_info(path)
    if info and "without_solution" in info:
        ui.print(f"cold-start SFT on {describe(info)}")
    return path


def banner(cfg: Config, start_from: Path) -> list[str]:
    """What the run is, in four lines, before it starts."""
    r, a, t = cfg.rollout, cfg.algo, cfg.train
    return [f"[bold]rlvr train[/]  run dir [cyan]{cfg.run_dir}[/]",
            f"  model {cfg.model.name} from {start_from}  task {cfg.task.name}  seed {cfg.seed}",
            f"  {t.steps} steps x {r.batch_size} prompts x G={r.group_size}  T={r.temperature}"
            f"  max_new_tokens={r.max_new_tokens}  lr={t.lr}  mu={t.ppo_epochs}",
            f"  loss {a.loss_type}  advantage {a.advantage}/{a.scale}  clip [{a.clip_low}, {a.clip_high}]"
            f"  beta={a.beta}  backend {cfg.deploy.backend}"]


@dataclass
class Run:
    """What a run fixes at its start; the steps read it and never change it (but eval_sync)."""

    cfg: Config
    ui: RunConsole
    log: RunLog
    guard: RunGuard
    tokenizer: Any
    engine: RolloutEngine
    """Evaluation's engine (eval.engine), in this process."""
    reward: Scorer
    held_out: list[Problem]
    source: BatchSource
    settings: UpdateSettings
    checkpointer: Checkpointer
    start_path: Path
    t_start: float
    par: Parallel
    rollout_model: Any
    """The full weights the engines sample with: the policy itself, or under FSDP the rank's
    unsharded copy that every sync overwrites."""
    store: RunStore | None = None
    """run.dir at a URL: where the local run directory is mirrored (rlvr.storage)."""
    eval_sync: Synced | None = None
    """The sync an evaluation made, reported by the next step (which then holds those weights)."""

    def evaluate(self, state: TrainerState, problems: list[Problem]) -> Evaluation:
        """Greedy accuracy of the current weights (an engine with weights of its own gets them first);
        in a trainer group rank 0 evaluates and every rank gets its figures."""
        synced = sync_weights(self.engine, state.model, state.step, state.step, self.par)
        if synced is not None:  # the next step samples with these weights: it reports their sync
            self.eval_sync = synced
        result = evaluate(self.engine, problems, self.reward, max_new_tokens=self.cfg.rollout.max_new_tokens,
                          batch_size=self.cfg.eval.batch_size) if self.par.main else None
        if self.par.main:  # eval.jsonl: every evaluation's per-problem outcomes, for paired tests
            self.log.evaluation(state.step, result["problems"])
        return self.par.broadcast(result)

    @property
    def recompute(self) -> bool:
        """Whether the update anchors on the trainer's own log-probs (algo.recompute_logprobs)."""
        return self.cfg.algo.recomputes(self.cfg.rollout.engine)

    def save(self, state: TrainerState, metrics: dict | None = None) -> None:
        self.checkpointer.save(state.step, state.model, self.tokenizer, state.state_dict(self.cfg.to_dict()),
                               metrics=metrics, optimizer=state.optimizer)


def sample_rows(batch: StepBatch, n: int) -> list[dict]:
    """A few completions per step for samples.jsonl, with their reward breakdown."""
    rows = []
    for i, c in enumerate(batch.completions[:n]):
        p, r = batch.problems[i], batch.results[i]
        row = {"problem_id": c.problem_id, "group_id": c.group_id, "source": p.source, "prompt": p.prompt,
               "completion": c.text, "answer": p.answer, "reward": r.total, "components": r.components,
               "valid": r.valid, "error": r.error, "advantage": float(batch.advantages[i]),
               "finish_reason": c.finish_reason}
        if len(c.turns) > 1 or c.env_info:  # a multi-turn episode: the whole trajectory, turn by turn
            row["turns"] = turn_rows(c)
            row["env_info"] = c.env_info
        rows.append(row)
    return rows


def turn_rows(c) -> list[dict]:
    """A trajectory for people: each turn's role, text, tool calls and the environment's rewards."""
    out = []
    for t in c.turns:
        row = {"role": t.role, "text": t.text, "tokens": t.end - t.start}
        for key in ("tool_calls", "components"):
            if t.info.get(key):
                row[key] = t.info[key]
        out.append(row)
    return out


def log_step_events(run: Run, step: int, batch: StepBatch, skipped_updates: int) -> None:
    """What a step did not do as asked, as events: invalid samples, a short batch, a skipped update."""
    counts = batch.counts
    if counts.invalid:
        run.log.event("invalid_samples", step=step, count=counts.invalid, errors=list(counts.errors))
    if counts.shortfall_groups:
        run.log.event("sampling_shortfall", step=step, groups=counts.shortfall_groups,
                      extra_rounds=counts.extra_rounds)
    if skipped_updates:
        run.log.event("skipped_update", step=step, count=skipped_updates)
        run.ui.warn(f"step {step}: {skipped_updates} update(s) skipped (non-finite loss or gradient)")


def open_run(cfg: Config, ui: RunConsole, make_source: Callable[[RunLog], BatchSource] | None,
             par: Parallel | None = None, start: Path | None = None) -> tuple[Run, TrainerState]:
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
        log = RunLog(cfg.run_dir, cfg.to_dict(), sinks=metric_sinks(cfg, resume_step=resume_step, ui=ui),
                     resume_step=resume_step)
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
    model, tokenizer = load_policy(cfg.model, start_path, device=par.device)  # dtype, checkpointing, LoRA; a resume loads its weights below
    policy = model
    if par.sharded:  # the engines (and the reference) keep full weights of their own; the policy is sharded
        model = copy.deepcopy(policy)
    reward = rule_reward(cfg)
    task = run_task(cfg, tokenizer=tokenizer, on_event=log.event)  # data files: skipped/cut records -> events
    engines = {}  # engine name -> engine, so evaluation shares the rollout engine when they are the same
    episodes = episode_spec(cfg)  # one set of environment workers for both
    for name in (cfg.rollout.engine if source is None else None, cfg.eval.engine or cfg.rollout.engine):
        if name is not None and name not in engines:
            engines[name] = rollout_engine(cfg, model, tokenizer, name=name, model_dir=start_path,  # hf, loop: the policy's own weights
                                           episodes=episodes)
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
        source = LocalBatches(engine, learned, ref, sampling_params(cfg.rollout), cfg.algo, cfg.rollout.batch_size,
                              cfg.rollout.sync_every, spec if spec.method != "none" else None, log, par=par,
                              credit=cfg.env.credit, teacher=teacher)
    retention = dict(config_hash=config_fingerprint(cfg.to_dict()), keep=cfg.ckpt.keep, keep_best=cfg.ckpt.keep_best,
                     best_mode=cfg.ckpt.best_mode)
    checkpointer = (ShardedCheckpointer(cfg.run_dir / "checkpoints", par=par, store=store, **retention) if par.sharded
                    else Checkpointer(cfg.run_dir / "checkpoints", async_write=cfg.ckpt.async_write,
                                      on_saved=store.push_checkpoint if store else None, **retention))
    settings = update_settings(cfg.algo, cfg.train, cfg.rollout, cfg.model.dtype)
    run = Run(cfg, ui, log, guard, tokenizer, engines[cfg.eval.engine or cfg.rollout.engine], reward, task_held_out,
              source, settings, checkpointer, start_path, t_start, par, model, store)
    state = TrainerState.create(cfg.train, cfg.seed, cfg.reward.monitor.stuck_steps,
                                par.shard(policy, offload=cfg.train.offload), task, guard, par)
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


def check_speculation(rollout: RolloutConfig, dtype: str, engine: RolloutEngine, model, tokenizer,
                      problems: list[Problem], log: RunLog) -> None:
    """Refuse a speculative method (rollout.speculative) that changes the sampling distribution
    (rlvr.rollout.speculative), before the run trains on it; the plain reference decodes in `dtype`."""
    spec = rollout.speculative
    params = dataclasses.replace(sampling_params(rollout), group_size=2)
    stats = check_speculative(engine, HFEngine(model, tokenizer, dtype=dtype), model, tokenizer,
                              problems[: spec.check_prompts],
                              params, method=spec.method, tolerance=spec.check_tolerance)
    log.event("speculative_checked", method=spec.method, **stats)


def train_step(run: Run, state: TrainerState) -> tuple[StepBatch, dict[str, float]]:
    """One step: a batch (sampled, scored, shaped: rlvr.train.step), the clipped policy update
    (mu epochs), the learning-rate schedule; returns the batch and the step's metrics."""
    state.step += 1
    t0 = time.time()
    reset_peak_memory()
    batch = run.source.collect(state.model, state.sampler, state.step)
    state.consumed = batch.sampler_position
    anchor = None
    sequences, advantages, loss_mask = batch.update_inputs()
    if run.recompute and sequences:  # the trainer's log-probs of the batch, before any update
        a = run.cfg.algo
        anchor = recompute_anchor(state.model, sequences, loss_mask, run.tokenizer.pad_token_id,
                                  run.settings.temperature, rollout_is=a.rollout_is, cap=a.rollout_is_cap,
                                  dtype=run.settings.dtype)
    t_update = time.time()
    actor = policy_update(state.model, state.optimizer, sequences, advantages, loss_mask,
                          batch.ref_logp, run.tokenizer.pad_token_id, run.settings, generator=state.update_rng,
                          fault=run.guard.fault(state.step), anchor=anchor, par=run.par)
    lr = state.scheduler.get_last_lr()[0]  # the rate this update used
    state.scheduler.step()
    memory = {k: max(v) for k, v in _columns(run.par.gather([peak_memory()])).items()}  # the largest rank's
    metrics = {**batch.metrics, **(anchor.metrics if anchor else {}), **actor, "actor/lr": lr,
               "time/update_s": time.time() - t_update, "perf/step_s": time.time() - t0, **memory}
    if run.eval_sync is not None:
        run.eval_sync.add_to(metrics)
        run.eval_sync = None
    # every rank acts on rank 0's figures (alerts, rollbacks, the monitor): they decide the same
    return batch, run.par.broadcast(metrics)


def _columns(rows: list[dict[str, float]]) -> dict[str, list[float]]:
    return {k: [r[k] for r in rows] for k in rows[0]}


def train(cfg: Config, ui: RunConsole | None = None,
          make_source: Callable[[RunLog], BatchSource] | None = None, start: Path | None = None) -> dict:
    """Run GRPO as configured; returns the summary (also in <run dir>/summary.json).
    make_source: called with the run log, returns where batches come from (the Ray backend's
    actors); None samples in this process. start: the policy RL starts from when the caller
    resolved it (the Ray driver); None: the cold start, run or found cached here."""
    check_env(cfg.env, cfg.task, cfg.algo, cfg.reward, cfg.sources)
    device = train_device(cfg.train.device)
    if device.type == "cuda" and cfg.rollout.speculative.method != "none" and cfg.rollout.engine != "vllm":
        raise ConfigError("rollout.speculative: the loop engine's speculative decoding runs on the CPU only; on "
                          "CUDA use rollout.engine=vllm (vLLM's methods, through the same fidelity check) or "
                          "rollout.speculative.method=none")
    if cfg.train.offload and device.type != "cuda":
        raise ConfigError("train.offload: there is no GPU memory to offload from (train.device resolved to "
                          f"{device.type}); leave train.offload=false")
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
        return _train(run, state)
    except SystemExit as exc:  # a run that did not complete never exits 0, whoever called sys.exit
        raise RunFailed(f"sys.exit({exc.code!r}) was called by user code run in the trainer's process (a reward "
                        "function, a tool or an environment with env.isolation=thread); the run did not "
                        "complete") from exc
    finally:
        if run is not None:
            run.engine.episodes.host.shutdown()  # the environment workers end with the run
        par.close()


def _cores_per_rank() -> int:
    """The CPU cores shared out among the ranks torchrun started on this machine (LOCAL_WORLD_SIZE)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // int(os.environ["LOCAL_WORLD_SIZE"]))


def _train(run: Run, state: TrainerState) -> dict:
    cfg, ui = run.cfg, run.ui
    ui.start(cfg.train.steps, completed=state.step)
    accuracy = None
    status = "completed"
    try:
        while state.step < cfg.train.steps:
            batch, metrics = train_step(run, state)
            step = state.step
            # alerts -> console, events, webhook; a rollback rule may fire
            trigger = run.guard.check(step, metrics, state.monitor.update(step, metrics))
            log_step_events(run, step, batch, int(metrics["actor/skipped_updates"]))
            if trigger is not None:  # diverged: back to the last good state, lower lr, new data order
                run.checkpointer.wait()  # a checkpoint still being written counts as a good state
                run.guard.roll_back(step, trigger, functools.partial(state.restore, rollback=True),
                                    functools.partial(run.par.full_state_dict, state.model))
                continue
            if cfg.eval.every and step % cfg.eval.every == 0 and step < cfg.train.steps:
                during = run.evaluate(state, run.held_out[: cfg.eval.n_during])
                metrics.update(eval_metrics(during))
                accuracy = during["accuracy"]
                state.history["eval"].append((step, accuracy))
            state.history["reward"].append(metrics["reward/mean"])
            run.log.metrics(step, metrics)
            run.log.samples(step, sample_rows(batch, cfg.log.samples_per_step))
            ui.update(step, metrics, accuracy)
            if cfg.ckpt.every and step % cfg.ckpt.every == 0:
                run.save(state, metrics)
    except BaseException as exc:  # SystemExit from user code too: a run that did not complete never exits 0
        status = "failed"
        run.log.event("failed", step=state.step, error=f"{type(exc).__name__}: {exc}")
        if not isinstance(exc, RunDiverged):
            raise
        ui.warn(str(exc))
    finally:
        ui.stop()
        run.reward.close()
        run.guard.close()
        if status == "failed":
            summary = finish(run, state, status)
    return summary if status == "failed" else finish(run, state, status)


def eval_change(before: dict | None, after: dict | None) -> dict | None:
    """Held-out after against before on the same problems: the difference with its 95% paired-
    bootstrap interval and the exact McNemar p-value (rlvr.stats.paired_report)."""
    if not before or not after or "problems" not in before:  # a resumed run from before per-problem outcomes
        return None
    if [r["id"] for r in before["problems"]] != [r["id"] for r in after["problems"]]:
        return None
    a = [float(r["correct"]) for r in before["problems"]]
    b = [float(r["correct"]) for r in after["problems"]]
    report = paired_report(a, b, alpha=0.05, iterations=10000, seed=0)
    return {"diff": report["diff"], "ci95": report["ci"], "mcnemar_p": report["mcnemar_p"],
            "only_before": report["only_a"], "only_after": report["only_b"]}


def recommended_tokens(run_dir: Path) -> int | None:
    """The run's recommended inference length so far (1.2 x P90 of the last steps' completion lengths)."""
    metrics = run_dir / "metrics.jsonl"
    rec = recommended_length(read_jsonl(metrics), None) if metrics.exists() else None
    return rec["tokens"] if rec else None


def finish(run: Run, state: TrainerState, status: str) -> dict:
    """The end of every run: a completed one is checkpointed, evaluated and exported; then the
    summary, the report and the closed log, whichever way it ended."""
    cfg, log = run.cfg, run.log
    eval_after = None
    if status == "completed":
        if cfg.ckpt.every and state.step % cfg.ckpt.every != 0:
            run.save(state)
        eval_after = run.evaluate(state, run.held_out)
        log.metrics(state.step, eval_metrics(eval_after))
    run.checkpointer.wait()  # a background write must finish before the export merges a LoRA adapter in place
    if status == "completed":
        plain = state.model
        if run.par.sharded:  # gathered one tensor at a time into the full copy rank 0 samples with
            weights = run.par.full_state_dict(state.model)
            plain = run.rollout_model
            result = plain.load_state_dict(weights, strict=False)
            check_loaded_keys(plain, weights, result.missing_keys, result.unexpected_keys, "the gathered FSDP weights")
        if run.par.main:  # Hugging Face format; LoRA merged; the recommended length as its generation default
            export_model(plain, run.tokenizer, cfg.run_dir / "model", max_new_tokens=recommended_tokens(cfg.run_dir))
    rewards = state.history["reward"]

    def figures(ev: dict | None) -> dict | None:
        if ev is None:
            return None
        return {"accuracy": ev["accuracy"], "n": ev["n"]} | ({"by_source": ev["by_source"]} if "by_source" in ev else {})

    summary = {
        "status": status, "steps": state.step, "wall_time_s": round(time.time() - run.t_start, 2), "seed": cfg.seed,
        "eval_before": figures(state.eval_before), "eval_after": figures(eval_after),
        "eval_change": eval_change(state.eval_before, eval_after),
        "reward_first": float(np.mean(rewards[:10])) if rewards else None,
        "reward_last": float(np.mean(rewards[-10:])) if rewards else None,
        "start_from": str(run.start_path), "cold_start": sft_info(run.start_path), "rollbacks": run.guard.rollbacks,
    }
    log.summary(summary)
    log.close()
    if not run.par.main:
        if run.store is not None:
            run.store.push()  # this rank's logs
        return summary
    if cfg.log.report:
        write_report_safely(cfg.run_dir, run.ui)
    if run.store is not None:
        run.store.push()
    if status == "completed":
        run.ui.summary(summary, cfg.run_dir)
    return summary
