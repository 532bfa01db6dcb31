"""The GRPO loop: sample -> generate -> reward -> advantage -> update -> log -> checkpoint.

Everything with detail lives in named modules; this file reads as the
algorithm. `Run` holds what a run fixes at the start (its parts and the
sections its steps read, built by rlvr.assembly.open_run), `TrainerState` what
its steps change; `train_step` is one step, `run_steps` the run to its end,
`finish` ends a run that completed or failed. Batches come from a
`BatchSource`: in this process (embedded), or from the Ray actors
(rlvr.deploy.ray.source).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.algos.truncation import ReplayStats
from rlvr.checkpoint import Checkpointer, check_loaded_keys
from rlvr.config import AlgoConfig, CkptConfig, EvalConfig, LogConfig, RolloutConfig
from rlvr.console import RunConsole
from rlvr.evaluate import Evaluation, eval_metrics, evaluate
from rlvr.models import export_model
from rlvr.ops.guard import RunDiverged, RunGuard
from rlvr.ops.report import recommended_length, write_report_safely
from rlvr.records import Problem
from rlvr.rewards import Scorer
from rlvr.rollout import HFEngine, RolloutEngine, sampling_params
from rlvr.rollout.speculative import check_speculative
from rlvr.runlog import RunLog, read_jsonl
from rlvr.stats import paired_report
from rlvr.storage import RunStore
from rlvr.train.memory import peak_memory, reset_peak_memory
from rlvr.train.parallel import Parallel
from rlvr.train.sft import sft_info
from rlvr.train.state import TrainerState
from rlvr.train.step import BatchSource, StepBatch
from rlvr.train.sync import Synced, sync_weights
from rlvr.train.parity import (
    batch_evidence,
    configured_precision,
    engine_precision,
    engine_weights_differ,
    parity_metrics,
    scores_as_sampled,
)
from rlvr.train.update import UpdateSettings, policy_update, recompute_anchor


@dataclass
class Run:
    """What a run fixes at its start (built by rlvr.assembly.open_run); the steps read it and never
    change it (but eval_sync)."""

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
    algo: AlgoConfig
    eval: EvalConfig
    ckpt: CkptConfig
    logging: LogConfig
    steps: int
    """train.steps"""
    max_new_tokens: int
    """rollout.max_new_tokens, evaluation's length too"""
    recompute: bool
    """Whether the update anchors on the trainer's own log-probs (AlgoConfig.recomputes)."""
    run_dir: Path
    seed: int
    config: dict
    """The whole config as written to config.yaml: checkpoints keep it."""
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
        result = (
            evaluate(
                self.engine, problems, self.reward, max_new_tokens=self.max_new_tokens, batch_size=self.eval.batch_size
            )
            if self.par.main
            else None
        )
        if self.par.main:  # eval.jsonl: every evaluation's per-problem outcomes, for paired tests
            self.log.evaluation(state.step, result["problems"])
        return self.par.broadcast(result)

    def save(self, state: TrainerState, metrics: dict | None = None) -> None:
        self.checkpointer.save(
            state.step,
            state.model,
            self.tokenizer,
            state.state_dict(self.config),
            metrics=metrics,
            optimizer=state.optimizer,
        )


def sample_rows(batch: StepBatch, n: int) -> list[dict]:
    """A few completions per step for samples.jsonl, with their reward breakdown."""
    rows = []
    for i, c in enumerate(batch.completions[:n]):
        p, r = batch.problems[i], batch.results[i]
        row = {
            "problem_id": c.problem_id,
            "group_id": c.group_id,
            "source": p.source,
            "prompt": p.prompt,
            "completion": c.text,
            "answer": p.answer,
            "reward": r.total,
            "components": r.components,
            "valid": r.valid,
            "error": r.error,
            "advantage": float(batch.advantages[i]),
            "finish_reason": c.finish_reason,
        }
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
        run.log.event("sampling_shortfall", step=step, groups=counts.shortfall_groups, extra_rounds=counts.extra_rounds)
    if skipped_updates:
        run.log.event("skipped_update", step=step, count=skipped_updates)
        run.ui.warn(f"step {step}: {skipped_updates} update(s) skipped (non-finite loss or gradient)")


def check_speculation(
    rollout: RolloutConfig, dtype: str, engine: RolloutEngine, model, tokenizer, problems: list[Problem], log: RunLog
) -> None:
    """Refuse a speculative method (rollout.speculative) that changes the sampling distribution
    (rlvr.rollout.speculative), before the run trains on it; the plain reference decodes in `dtype`."""
    spec = rollout.speculative
    params = dataclasses.replace(sampling_params(rollout), group_size=2)
    stats = check_speculative(
        engine,
        HFEngine(model, tokenizer, dtype=dtype),
        model,
        tokenizer,
        problems[: spec.check_prompts],
        params,
        method=spec.method,
        tolerance=spec.check_tolerance,
    )
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
    replay = ReplayStats()
    if run.recompute and sequences:  # the trainer's log-probs of the batch, before any update
        a = run.algo
        anchor = recompute_anchor(
            state.model,
            sequences,
            loss_mask,
            run.tokenizer.pad_token_id,
            run.settings.temperature,
            rollout_is=a.rollout_is,
            cap=a.rollout_is_cap,
            dtype=run.settings.dtype,
            truncation=run.settings.truncation,
            replay_stats=replay,
        )
    probe = None
    if anchor is None and sequences and scores_as_sampled(state.model):
        probe = torch.full((len(sequences), max(1, max(len(c.token_ids) for c in sequences))), math.nan)
    t_update = time.time()
    actor = policy_update(
        state.model,
        state.optimizer,
        sequences,
        advantages,
        loss_mask,
        batch.ref_logp,
        run.tokenizer.pad_token_id,
        run.settings,
        generator=state.update_rng,
        fault=run.guard.fault(state.step),
        anchor=anchor,
        par=run.par,
        replay_stats=replay if anchor is None else None,
        probe=probe,
    )
    parity = step_parity(run, state, batch, sequences, loss_mask, anchor, probe, replay)
    lr = state.scheduler.get_last_lr()[0]  # the rate this update used
    state.scheduler.step()
    memory = {k: max(v) for k, v in _columns(run.par.gather([peak_memory()])).items()}  # the largest rank's
    metrics = {
        **batch.metrics,
        **(anchor.metrics if anchor else {}),
        **parity,
        **actor,
        "actor/lr": lr,
        "time/update_s": time.time() - t_update,
        "perf/step_s": time.time() - t0,
        **memory,
    }
    if run.eval_sync is not None:
        run.eval_sync.add_to(metrics)
        run.eval_sync = None
    # every rank acts on rank 0's figures (alerts, rollbacks, the monitor): they decide the same
    return batch, run.par.broadcast(metrics)


def step_parity(run: Run, state: TrainerState, batch, sequences, loss_mask, anchor, probe, replay: ReplayStats) -> dict:
    """The step's parity check (rlvr.train.parity), on the trainer's log-probs before the update: the
    anchor's (every rank scored the whole batch) or the update's first mini-batch's (each rank its
    share: the rows a rank left NaN another one has)."""
    trainer_logp = anchor.old_logp if anchor is not None else probe
    if trainer_logp is None:
        return {}
    if anchor is None and run.par.world > 1:
        parts = run.par.gather([(trainer_logp, replay.tokens, replay.set_mismatch)])
        trainer_logp = functools.reduce(lambda a, b: torch.where(a.isnan(), b, a), [p[0] for p in parts])
        replay = ReplayStats(tokens=sum(p[1] for p in parts), set_mismatch=sum(p[2] for p in parts))
    engine = getattr(run.source, "engine", None)  # the sampling engine, when in this process (Ray's check their syncs)

    def evidence():
        synced = int(batch.metrics.get("sync/checksum_mismatch", 0))
        return batch_evidence(
            sequences,
            replayed=run.settings.truncation is not None,
            replay=replay,
            engine_dtype=engine_precision(engine) if engine is not None else configured_precision(run.config),
            trainer_dtype=run.settings.dtype,
            weights_mismatch=synced
            or (engine_weights_differ(engine, run.rollout_model, state.step - 1) if engine is not None else 0),
        )

    return parity_metrics(trainer_logp, sequences, loss_mask, state.step - 1, run.algo.parity_threshold, evidence)


def _columns(rows: list[dict[str, float]]) -> dict[str, list[float]]:
    return {k: [r[k] for r in rows] for k in rows[0]}


def run_steps(run: Run, state: TrainerState) -> dict:
    """The steps from state.step to the last, then `finish`; the run's summary."""
    ui = run.ui
    ui.start(run.steps, completed=state.step)
    accuracy = None
    status = "completed"
    try:
        while state.step < run.steps:
            batch, metrics = train_step(run, state)
            step = state.step
            # alerts -> console, events, webhook; a rollback rule may fire
            trigger = run.guard.check(step, metrics, state.monitor.update(step, metrics))
            log_step_events(run, step, batch, int(metrics["actor/skipped_updates"]))
            if trigger is not None:  # diverged: back to the last good state, lower lr, new data order
                run.checkpointer.wait()  # a checkpoint still being written counts as a good state
                run.guard.roll_back(
                    step,
                    trigger,
                    functools.partial(state.restore, rollback=True),
                    functools.partial(run.par.full_state_dict, state.model),
                )
                continue
            if run.eval.every and step % run.eval.every == 0 and step < run.steps:
                during = run.evaluate(state, run.held_out[: run.eval.n_during])
                metrics.update(eval_metrics(during))
                accuracy = during["accuracy"]
                state.history["eval"].append((step, accuracy))
            state.history["reward"].append(metrics["reward/mean"])
            run.log.metrics(step, metrics)
            run.log.samples(step, sample_rows(batch, run.logging.samples_per_step))
            ui.update(step, metrics, accuracy)
            if run.ckpt.every and step % run.ckpt.every == 0:
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
    return {
        "diff": report["diff"],
        "ci95": report["ci"],
        "mcnemar_p": report["mcnemar_p"],
        "only_before": report["only_a"],
        "only_after": report["only_b"],
    }


def recommended_tokens(run_dir: Path) -> int | None:
    """The run's recommended inference length so far (1.2 x P90 of the last steps' completion lengths)."""
    metrics = run_dir / "metrics.jsonl"
    rec = recommended_length(read_jsonl(metrics), None) if metrics.exists() else None
    return rec["tokens"] if rec else None


def finish(run: Run, state: TrainerState, status: str) -> dict:
    """The end of every run: a completed one is checkpointed, evaluated and exported; then the
    summary, the report and the closed log, whichever way it ended."""
    log = run.log
    eval_after = None
    if status == "completed":
        if run.ckpt.every and state.step % run.ckpt.every != 0:
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
            export_model(plain, run.tokenizer, run.run_dir / "model", max_new_tokens=recommended_tokens(run.run_dir))
    rewards = state.history["reward"]

    def figures(ev: dict | None) -> dict | None:
        if ev is None:
            return None
        return {"accuracy": ev["accuracy"], "n": ev["n"]} | (
            {"by_source": ev["by_source"]} if "by_source" in ev else {}
        )

    summary = {
        "status": status,
        "steps": state.step,
        "wall_time_s": round(time.time() - run.t_start, 2),
        "seed": run.seed,
        "eval_before": figures(state.eval_before),
        "eval_after": figures(eval_after),
        "eval_change": eval_change(state.eval_before, eval_after),
        "reward_first": float(np.mean(rewards[:10])) if rewards else None,
        "reward_last": float(np.mean(rewards[-10:])) if rewards else None,
        "start_from": str(run.start_path),
        "cold_start": sft_info(run.start_path),
        "rollbacks": run.guard.rollbacks,
    }
    log.summary(summary)
    log.close()
    if not run.par.main:
        if run.store is not None:
            run.store.push()  # this rank's logs
        return summary
    if run.logging.report:
        write_report_safely(run.run_dir, run.ui)
    if run.store is not None:
        run.store.push()
    if status == "completed":
        run.ui.summary(summary, run.run_dir)
    return summary
