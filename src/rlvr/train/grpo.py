"""The GRPO driver: sample -> generate -> reward -> advantage -> update -> log -> checkpoint.

Everything with detail lives in named modules; this file reads as the
algorithm. Runs embedded (one process, modules called in sequence).
"""

from __future__ import annotations

import copy
import random
import time
from pathlib import Path

import numpy as np
import torch

from rlvr.checkpoint import (Checkpointer, config_drift, config_fingerprint, load_weights, resume_point, rng_state,
                             set_rng_state)
from rlvr.config import Config
from rlvr.console import RunConsole
from rlvr.evaluate import evaluate
from rlvr.inference.reference import ReferenceModel
from rlvr.models import export_model, load_policy, reference_policy
from rlvr.ops.guard import RunDiverged, RunGuard, Snapshot, rescale_lr
from rlvr.ops.report import write_report_safely
from rlvr.ops.sinks import build_sinks
from rlvr.rewards import RewardMonitor, build_reward
from rlvr.rollout.hf import SamplingParams
from rlvr.runlog import RunLog
from rlvr.tasks import ProblemSampler, build_task, has_worked_solutions
from rlvr.train.sft import run_sft
from rlvr.train.lr import lr_factor
from rlvr.train.memory import peak_memory, reset_peak_memory
from rlvr.train.step import StepBatch, collect_batch
from rlvr.train.update import UpdateSettings, policy_update


def config_hash(cfg: Config) -> str:
    return config_fingerprint(cfg.to_dict())


def starting_point(cfg: Config, ui: RunConsole) -> Path:
    """The policy RL starts from: model.init_from, or the (cached) cold-start SFT checkpoint."""
    if cfg.model.init_from:
        return Path(cfg.model.init_from)
    if cfg.sft.steps == 0 or not has_worked_solutions(cfg):  # data files carry no worked solutions to imitate
        from rlvr.train.sft import base_model_path
        return base_model_path(cfg)
    ui.print(f"cold-start SFT: {cfg.sft.steps} steps (cached after the first run)")
    return run_sft(cfg)


def sample_rows(batch: StepBatch, n: int) -> list[dict]:
    """A few completions per step for samples.jsonl, with their reward breakdown."""
    rows = []
    for i, c in enumerate(batch.completions[:n]):
        p, r = batch.problems[i], batch.results[i]
        rows.append({"problem_id": c.problem_id, "group_id": c.group_id, "source": p.source, "prompt": p.prompt,
                     "completion": c.text, "answer": p.answer, "reward": r.total, "components": r.components,
                     "valid": r.valid, "error": r.error, "advantage": float(batch.advantages[i]),
                     "finish_reason": c.finish_reason})
    return rows


def log_step_events(log: RunLog, ui: RunConsole, step: int, batch: StepBatch, metrics: dict[str, float],
                    group_size: int) -> None:
    """What a step did not do as asked, as events: invalid samples, a short batch, a skipped update."""
    if metrics["reward/invalid_frac"] > 0:
        n_sampled = metrics["rollout/groups"] * group_size
        log.event("invalid_samples", step=step, count=int(round(metrics["reward/invalid_frac"] * n_sampled)),
                  errors=sorted({r.error for r in batch.results if not r.valid and r.error})[:5])
    if metrics["rollout/shortfall_groups"]:
        log.event("sampling_shortfall", step=step, groups=int(metrics["rollout/shortfall_groups"]),
                  extra_rounds=int(metrics["rollout/extra_rounds"]))
    if skipped := int(metrics["actor/skipped_updates"]):
        log.event("skipped_update", step=step, count=skipped)
        ui.warn(f"step {step}: {skipped} update(s) skipped (non-finite loss or gradient)")


def update_settings(cfg: Config) -> UpdateSettings:
    a, t, r = cfg.algo, cfg.train, cfg.rollout
    return UpdateSettings(
        ppo_epochs=t.ppo_epochs, mini_batches=t.mini_batches, micro_batch_size=t.micro_batch_size,
        max_grad_norm=t.max_grad_norm, temperature=r.temperature, loss_type=a.loss_type,
        clip_low=a.clip_low, clip_high=a.clip_high, dual_clip=a.dual_clip, ratio_level=a.ratio_level,
        beta=0.0 if a.kl_in_reward else a.beta,  # with kl_in_reward the KL is in the advantages already
        kl_kind=a.kl_estimator, max_len=r.max_new_tokens, entropy_coef=a.entropy_coef)


def train(cfg: Config, ui: RunConsole | None = None, batch_source=None) -> dict:
    """batch_source: called with the RunLog, returns the step's batch collector (same signature as
    `collect_batch`); the Ray backend's runs on its actors. None: collect in this process."""
    ui = ui or RunConsole(cfg.run.progress)
    t_start = time.time()
    run_dir = cfg.run_dir
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)

    resume, unusable = resume_point(cfg.ckpt.resume, run_dir / "checkpoints")
    resume_step = resume.step if resume else None
    log = RunLog(run_dir, cfg.to_dict(), sinks=build_sinks(cfg, run_dir, resume_step=resume_step, ui=ui),
                 resume_step=resume_step)
    for problem in unusable:
        ui.warn(f"checkpoint {problem}; skipped in favour of an older one")
        log.event("checkpoint_skipped", problem=problem)
    guard = RunGuard(cfg, log, ui)  # alert rules, rollback, fault injection
    collect = batch_source(log) if batch_source else collect_batch
    start_path = starting_point(cfg, ui)
    # seeded after the cold start, which draws from the same generators when it is not cached yet:
    # the first run and every later one (SFT cached) sample the same
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    ui.banner(cfg, run_dir, str(start_path))

    model, tokenizer = load_policy(cfg.model, start_path)  # dtype, checkpointing, LoRA; a resume loads its weights below
    reward = build_reward(cfg.reward)
    monitor = RewardMonitor(cfg.reward.monitor.stuck_steps)
    task = build_task(cfg, tokenizer=tokenizer, on_event=log.event)  # data files: skipped/cut records -> events
    held_out = task.held_out()[: cfg.eval.n]
    ref = None
    if cfg.algo.beta > 0:  # beta = 0 loads no reference model at all
        ref = ReferenceModel(reference_policy(model), tokenizer.pad_token_id, cfg.rollout.temperature)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay,
                                  betas=(0.9, 0.99))
    t = cfg.train
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(
        s, total=t.steps, warmup=t.warmup, schedule=t.lr_schedule, min_ratio=t.min_lr_ratio))
    update_rng = torch.Generator().manual_seed(cfg.seed)
    sampler = ProblemSampler(task, seed=cfg.seed)
    # where a resume continues: the end of the last batch trained on, not of batches sampled ahead (async Ray)
    consumed = 0
    params = SamplingParams(group_size=cfg.rollout.group_size, temperature=cfg.rollout.temperature,
                            top_p=cfg.rollout.top_p, max_new_tokens=cfg.rollout.max_new_tokens,
                            decode=cfg.rollout.decode)
    settings = update_settings(cfg)
    eval_kwargs = dict(max_new_tokens=cfg.rollout.max_new_tokens, batch_size=cfg.eval.batch_size)

    checkpointer = Checkpointer(run_dir / "checkpoints", config_hash=config_hash(cfg), keep=cfg.ckpt.keep,
                                keep_best=cfg.ckpt.keep_best, best_mode=cfg.ckpt.best_mode,
                                async_write=cfg.ckpt.async_write)

    def trainer_state() -> dict:
        return {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "update_rng": update_rng.get_state(), "sampler_position": consumed,
                "rng": rng_state(), "eval_before": eval_before, "history": history,
                "monitor": monitor.state_dict(), "guard": guard.state_dict(), "config": cfg.to_dict()}

    def restore(ckpt, rollback: bool = False) -> int:
        """Weights and trainer state of a checkpoint; a rollback keeps its own count, lr scale and data seed."""
        nonlocal sampler, consumed, eval_before, history
        state = ckpt.trainer_state()
        load_weights(model, ckpt.model_dir)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        update_rng.set_state(state["update_rng"])
        set_rng_state(state["rng"])
        monitor.load_state_dict(state["monitor"])
        guard.load_state_dict(state["guard"], rules_only=rollback)
        rescale_lr(optimizer, scheduler, guard.lr_scale / state["guard"]["lr_scale"])
        consumed = state["sampler_position"]
        sampler = ProblemSampler(task, seed=guard.data_seed(cfg.seed), position=consumed)
        eval_before, history = state["eval_before"], state["history"]
        return ckpt.step

    step, eval_before, history = 0, None, {"reward": [], "eval": []}
    if resume:
        step = restore(resume)
        changes = config_drift(resume, cfg.to_dict())
        log.event("resume", step=step, checkpoint=str(resume.path), config_changes=changes)
        ui.print(f"resumed from {resume.path} at step {step}")
        for change in changes:
            ui.warn(f"resuming with a changed setting: {change}")
    else:
        eval_before = evaluate(model, tokenizer, held_out, reward, **eval_kwargs)
        history = {"reward": [], "eval": []}
        log.metrics(0, {"eval/accuracy": eval_before["accuracy"], "eval/format": eval_before["format"]})
        ui.print(f"held-out accuracy before RL: {eval_before['accuracy']:.1%} (n={eval_before['n']}, greedy)")
        guard.start = Snapshot(0, start_path, copy.deepcopy(trainer_state()))  # rollback target before any checkpoint

    def save(at_step: int, metrics: dict | None = None):
        checkpointer.save(at_step, model, tokenizer, trainer_state(), metrics=metrics)

    ui.start(cfg.train.steps, completed=step)
    accuracy = None
    status = "completed"
    try:
        while step < cfg.train.steps:
            step += 1
            t0 = time.time()
            reset_peak_memory()
            # 1-4. sample prompts, generate G completions each, score them (dropping groups with no
            # signal under dynamic sampling), reference log-probs, shaped rewards, group-relative advantages
            batch = collect(model, tokenizer, sampler, reward, params, cfg.algo,
                            batch_size=cfg.rollout.batch_size, step=step, ref=ref)
            consumed = batch.sampler_position
            # 5. clipped policy update (mu epochs)
            t2 = time.time()
            actor = policy_update(model, optimizer, batch.completions, batch.advantages, batch.loss_mask,
                                  batch.ref_logp, tokenizer.pad_token_id, settings, generator=update_rng,
                                  fault=guard.fault(step))
            lr = scheduler.get_last_lr()[0]  # the rate this update used
            scheduler.step()
            # 6. log
            metrics = {**batch.metrics, **actor, "actor/lr": lr,
                       "time/update_s": time.time() - t2, "perf/step_s": time.time() - t0, **peak_memory()}
            trigger = guard.check(step, metrics, monitor.update(step, metrics))  # alerts -> console, events, webhook
            log_step_events(log, ui, step, batch, metrics, cfg.rollout.group_size)
            if trigger is not None:  # diverged: back to the last good state, lower lr, new data order
                checkpointer.wait()  # a checkpoint still being written counts as a good state
                step = guard.roll_back(step, trigger, lambda good: restore(good, rollback=True), model)
                continue
            if cfg.eval.every and step % cfg.eval.every == 0 and step < cfg.train.steps:
                ev = evaluate(model, tokenizer, held_out[: cfg.eval.n_during], reward, **eval_kwargs)
                accuracy = ev["accuracy"]
                metrics["eval/accuracy"] = accuracy
                history["eval"].append((step, accuracy))
            history["reward"].append(metrics["reward/mean"])
            log.metrics(step, metrics)
            log.samples(step, sample_rows(batch, cfg.log.samples_per_step))
            ui.update(step, metrics, accuracy)
            # 7. checkpoint
            if cfg.ckpt.every and step % cfg.ckpt.every == 0:
                save(step, metrics)
    except Exception as exc:
        status = "failed"
        log.event("failed", step=step, error=f"{type(exc).__name__}: {exc}")
        if not isinstance(exc, RunDiverged):
            raise
        ui.warn(str(exc))
    finally:
        ui.stop()
        reward.close()
        guard.close()
        if status == "failed":
            checkpointer.wait()
            log.summary({"status": status, "steps": step, "wall_time_s": time.time() - t_start,
                         "eval_before": eval_before, "eval_after": None, "rollbacks": guard.rollbacks})
            log.close()
            if cfg.log.report:
                write_report_safely(run_dir, ui)
    if status == "failed":
        return {"status": status, "steps": step, "rollbacks": guard.rollbacks}

    if cfg.ckpt.every and step % cfg.ckpt.every != 0:
        save(step)
    eval_after = evaluate(model, tokenizer, held_out, reward, **eval_kwargs)
    log.metrics(step, {"eval/accuracy": eval_after["accuracy"], "eval/format": eval_after["format"]})
    checkpointer.wait()  # a background write must finish before the export merges a LoRA adapter in place
    export_model(model, tokenizer, run_dir / "model")  # Hugging Face format; a LoRA adapter is merged
    rewards_hist = history["reward"]
    summary = {
        "status": status, "steps": step, "wall_time_s": round(time.time() - t_start, 2), "seed": cfg.seed,
        "eval_before": {"accuracy": eval_before["accuracy"], "n": eval_before["n"]},
        "eval_after": {"accuracy": eval_after["accuracy"], "n": eval_after["n"]},
        "reward_first": float(np.mean(rewards_hist[:10])) if rewards_hist else None,
        "reward_last": float(np.mean(rewards_hist[-10:])) if rewards_hist else None,
        "start_from": str(start_path),
        "rollbacks": guard.rollbacks,
    }
    log.summary(summary)
    log.close()
    if cfg.log.report:
        write_report_safely(run_dir, ui)
    ui.summary(summary, run_dir)
    return summary
