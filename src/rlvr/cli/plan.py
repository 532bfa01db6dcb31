"""`rlvr plan`: how much memory each pool needs, how long a step takes, how to split the GPUs.

    rlvr plan --config configs/smollm2.yaml --prompt-len 100           # this machine, one process
    rlvr plan --params 7e9 model.dtype=bfloat16 train.strategy=fsdp rollout.group_size=16 \\
        --cluster nodes=2,gpus=8,gpu_gb=80 --decode-tps 2500 --train-tflops 300 --json plan.json
    rlvr plan --config configs/smollm2.yaml --measured runs/smollm2-learn  # throughputs of a run

The model is model.name (a directory, a packaged name, 'tiny') or, with --params N, the published
shape nearest to N parameters. The formulas are in rlvr.plan.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from rlvr.cli._common import add_config_arguments, config_from_args
from rlvr.configlib import ConfigError
from rlvr.runlog import read_jsonl


def add_arguments(parser) -> None:
    parser.add_argument(
        "--params",
        type=float,
        metavar="N",
        help="plan for the published shape nearest to N parameters (e.g. 7e9) instead of model.name",
    )
    parser.add_argument("--prompt-len", type=int, metavar="T", help="prompt tokens (default data.max_prompt_tokens)")
    parser.add_argument("--ranks", type=int, metavar="N", help="trainer ranks (default train.world_size, or 1)")
    parser.add_argument(
        "--cluster",
        metavar="SPEC",
        help="nodes=2,gpus=8,gpu_gb=80,cpus=64,host_gb=512 (per node; default: this machine, no GPU)",
    )
    parser.add_argument("--decode-tps", type=float, metavar="X", help="rollout tokens/s of one rollout device")
    parser.add_argument("--train-tflops", type=float, metavar="Y", help="sustained TFLOP/s of one training device")
    parser.add_argument("--sync-gbps", type=float, metavar="Z", help="GB/s of a weight sync, trainer to rollout engine")
    parser.add_argument(
        "--measured",
        metavar="RUN_DIR",
        help="take the throughputs (and the weight sync's GB/s, if it moved any) from a run's metrics",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the plan as JSON")
    add_config_arguments(parser)


def measured_throughputs(run_dir: str, plan_fn) -> tuple[float, float, float | None]:
    """(decode tokens/s, training TFLOP/s, weight sync GB/s) from a run's metrics: the medians of
    perf/rollout_tok_s, of the update's FLOPs (rlvr.plan, with the run's own settings) over
    time/update_s, and of sync/bytes over sync/seconds (None: no sync moved bytes)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise ConfigError(f"--measured: {path} does not exist; give a run directory")
    rows = [r for r in read_jsonl(path) if "time/update_s" in r and "perf/rollout_tok_s" in r]
    if not rows:
        raise ConfigError(f"--measured: {path} has no finished step")
    tokens = [r.get("rollout/len_mean", 0) for r in rows]
    plan = plan_fn(statistics.median(tokens))
    update_flops = plan["flops_per_step"]["update"] + plan["flops_per_step"]["logprob_passes"]
    syncs = [r["sync/bytes"] / r["sync/seconds"] / 1e9 for r in rows if r.get("sync/bytes") and r.get("sync/seconds")]
    return (
        statistics.median(r["perf/rollout_tok_s"] for r in rows),
        update_flops / statistics.median(r["time/update_s"] for r in rows) / 1e12,
        statistics.median(syncs) if syncs else None,
    )


def run_plan(cfg, shape, cluster, *, prompt_len: int | None = None, **estimates) -> dict:
    """rlvr.plan's estimate of the run (its sections model, rollout, algo, train, deploy, reward) on
    `cluster`; prompt_len defaults to data.max_prompt_tokens. estimates: plan's measured figures."""
    from rlvr.plan import plan

    return plan(
        shape,
        cluster,
        model=cfg.model,
        rollout=cfg.rollout,
        algo=cfg.algo,
        train=cfg.train,
        deploy=cfg.deploy,
        reward=cfg.reward,
        prompt_len=prompt_len or cfg.data.max_prompt_tokens,
        **estimates,
    )


def run(args) -> int:
    from rlvr.plan import parse_cluster, shape_for_params, shape_of

    cfg = config_from_args(args)
    try:
        cluster = parse_cluster(args.cluster)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if args.params:
        shape = shape_for_params(args.params)
    else:
        from rlvr.assembly import base_model_path  # 'tiny' is built locally, once

        shape = shape_of(base_model_path(cfg))
    reward_params = {name: shape_of(m.path).params for name, m in cfg.reward.models.items()}
    teacher = None
    if cfg.algo.distill.teacher:
        from rlvr.inference.reference import teacher_path

        teacher = shape_of(teacher_path(cfg.algo.distill.teacher, cfg.model)).params
    kwargs = dict(prompt_len=args.prompt_len, ranks=args.ranks, reward_params=reward_params, teacher_params=teacher)
    decode, tflops, sync = args.decode_tps, args.train_tflops, args.sync_gbps
    if args.measured:
        import dataclasses

        def with_lengths(mean_len: float) -> dict:  # the update's FLOPs at the run's mean completion length
            r = dataclasses.replace(cfg.rollout, max_new_tokens=max(1, round(mean_len)))
            return run_plan(dataclasses.replace(cfg, rollout=r), shape, cluster, **kwargs)

        decode, tflops, measured_sync = measured_throughputs(args.measured, with_lengths)
        sync = sync or measured_sync
    result = run_plan(cfg, shape, cluster, decode_tps=decode, train_tflops=tflops, sync_gbps=sync, **kwargs)
    print_plan(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def print_plan(p: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    m, s = p["model"], p["settings"]
    console = Console()
    console.print(
        f"model: {m['params'] / 1e6:,.0f}M parameters ({m['layers']} layers, hidden {m['hidden']}, "
        f"vocab {m['vocab']}; {m['source']}), {m['trainable_params'] / 1e6:,.1f}M trainable; "
        f"{s['dtype']}, {s['strategy']} x {s['trainer_ranks']}, {s['prompts_per_step']} prompts x G="
        f"{s['group_size']}, {s['prompt_len']} + {s['max_new_tokens']} tokens, micro-batch {s['micro_batch']}"
    )
    table = Table(title="memory per pool (GiB; the trainer per rank, the rollout per replica)")
    for col in ("pool", "terms", "total"):
        table.add_column(col)
    for name, pool in p["pools"].items():
        if not pool["terms_gb"]:
            continue
        terms = ", ".join(f"{k} {v:.2f}" for k, v in pool["terms_gb"].items())
        table.add_row(name, f"{terms}, runtime {pool['runtime_gb']:.2f}", f"{pool['total_gb']:.2f}")
    table.add_row("one process", "every pool embedded (deploy.backend=embedded)", f"{p['embedded_process_gb']:.2f}")
    console.print(table)
    f = p["flops_per_step"]
    console.print(
        f"per step: {p['tokens_per_step']:,} tokens ({p['generated_per_step']:,} generated); "
        f"TFLOPs rollout {f['rollout'] / 1e12:.2f}, update {f['update'] / 1e12:.2f}, "
        f"log-prob passes {f['logprob_passes'] / 1e12:.2f}; sandbox {p['sandbox']['cpus']} CPUs, "
        f"{p['sandbox']['memory_gb']:.1f} GiB"
    )
    w = p["sync"]
    console.print(
        f"weight sync: {w['method']}, "
        + (
            f"{w['bytes'] / 2**20:,.1f} MiB every {w['every_steps']} step(s)"
            if w["bytes"]
            else "nothing moved (the trainer's own tensors)"
        )
    )
    t = p["times"]
    if t:
        console.print("time on one device: " + ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in t.items()))
    split = p["split"]
    if split["gpus"] == 0:
        console.print("no GPU: " + ("fits" if split["fits"] else f"does not fit: {split['why']}"))
    elif split["fits"]:
        console.print(
            f"split of {split['gpus']} GPUs: rollout {split['rollout_gpus']}, training {split['trainer_gpus']}, "
            f"inference {split['inference_gpus']} (a training rank {split['trainer_rank_gb']:.1f} GiB, a "
            f"rollout GPU {split['rollout_gpu_gb']:.1f} GiB"
            + (f"; step ~{split['step_s']:.1f} s overlapped)" if "step_s" in split else ")")
        )
        for reason in split["not_fitting"]:
            console.print(f"  does not fit: {reason}")
    else:
        print(f"rlvr plan: does not fit: {split['why']}", file=sys.stderr)
