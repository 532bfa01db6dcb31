"""Every phase of a GRPO step against this machine's limits, measured in one run.

    .venv/bin/python bench/bench_roofline.py --models tiny,smollm2 --threads 1,2 --json bench/roofline_results.json

Per model (the default run's tiny model; SmolLM2-135M-Instruct with `configs/smollm2.yaml`) and
per torch thread count:

- limits: fp32 (and bf16) matmul FLOP/s at the model's shapes (4096 rows x hidden x intermediate),
  memory bandwidth (a 256 MB copy), and the decode bound of a batch of R rows: the slower of
  reading the weights once per step over the bandwidth and 2 x params x R over the matmul peak.
- update: `policy_update` on a batch the loop engine sampled (the config's G, length and
  temperature; every sequence carries gradient), model FLOPs = 6 x (body params x all tokens +
  head params x scored tokens) + causal attention 6 x layers x hidden x n^2 per sequence, over
  wall time, as a fraction of the fp32 matmul peak (`mfu`): timed twice, the second call (memory
  reused, as in a run after its first step) gives `mfu`, the first `first_call_seconds` (its memory
  mapped fresh, after the heap was trimmed). Variants side by side: `before`
  (the full (B, T, V) logits as rlvr built them before, re-created here), `chunked` (now),
  `packed` (train.micro_batch_tokens); peak RSS of each. The same for the no-grad log-prob
  pass (reference / old log-probs: 2 x params x tokens).
- rollout: completion tokens/s of each engine at the step's rows (batch_size x G) and at 128
  rows, against the bound at that many rows (`of_bound`); `loop@base` is the loop engine of the
  commit before this work (`--base-rev`), loaded from git, for the ratio to it in the same run.
  Each rollout runs twice, the same seed: `tok_s` and `of_bound` from the second (a run's rollouts
  after its first: the heap holds freed memory, the libraries have seen the shapes),
  `first_call_tok_s` beside it; before each, the weights change in place (x 1.0: their versions
  move, as after an optimizer step), so the loop engine packs them again as in training.
- every ratio (MFU, of_bound) is taken against the highest limits of three measurements, before
  the update, after it and after the rollouts (`limits_measured`): the host is shared and its
  matmul peak moves by up to 2x within minutes; the lines printed during the run use the first.
- rest of a step: a 2-step `rlvr train` of the config: the share of step time outside rollout,
  reward, reference and update.

Timings on a shared machine are noisy: compare within one run. `--quick` shortens everything.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from rlvr.kernels import start_as_rlvr  # noqa: E402

start_as_rlvr()  # the kernels and allocator settings `rlvr train` runs with (RLVR_NATIVE_KERNELS=1: the CPU's own kernels)

import torch  # noqa: E402

BASE_REV = "4be00f4"
"""The last commit before the CPU performance work (2026-12-03): its decode loop is the rollout baseline."""


def timed(fn, *, min_s: float = 1.0, min_reps: int = 3) -> float:
    """Seconds per call (after one warm-up), repeated until min_s has passed."""
    fn()
    reps, t0 = 0, time.perf_counter()
    while reps < min_reps or time.perf_counter() - t0 < min_s:
        fn()
        reps += 1
    return (time.perf_counter() - t0) / reps


def limits(cfg_model) -> dict:
    """Matmul FLOP/s at the model's shapes (fp32, bf16) and memory bandwidth."""
    h, i = cfg_model.hidden_size, cfg_model.intermediate_size
    a, b = torch.randn(4096, h), torch.randn(h, i)
    fl = 2 * 4096 * h * i
    out = {"matmul_fp32_gflops": fl / timed(lambda: a @ b) / 1e9}
    ab, bb = a.bfloat16(), b.bfloat16()
    out["matmul_bf16_gflops"] = fl / timed(lambda: ab @ bb, min_reps=1, min_s=0.5) / 1e9
    x = torch.randn(64 << 20)  # 256 MB
    y = torch.empty_like(x)
    out["bandwidth_gbs"] = 2 * x.numel() * 4 / timed(lambda: y.copy_(x)) / 1e9
    return {k: round(v, 1) for k, v in out.items()}


def param_counts(model) -> dict:
    head = model.get_output_embeddings().weight
    total = sum(p.numel() for p in model.parameters())  # tied weights once
    embed = model.get_input_embeddings().weight
    tied = head is embed
    return {
        "params": total,
        "head": head.numel(),
        "body": total - (0 if tied else embed.numel()) - head.numel(),
        "weight_bytes": total * 4,
        "layers": model.config.num_hidden_layers,
        "hidden": model.config.hidden_size,
    }


def decode_bound(counts: dict, lim: dict, rows: int) -> float:
    """Tokens/s bound of one decode step at `rows` rows: weights once per step over the bandwidth,
    or 2 x params x rows over the fp32 matmul peak, whichever is slower."""
    step_s = max(
        counts["weight_bytes"] / (lim["bandwidth_gbs"] * 1e9),
        2 * counts["params"] * rows / (lim["matmul_fp32_gflops"] * 1e9),
    )
    return rows / step_s


def load_base_decode(rev: str):
    """The decode function of commit `rev` (rlvr.rollout.decode as it was), or None."""
    try:
        src = subprocess.run(
            ["git", "show", f"{rev}:src/rlvr/rollout/decode.py"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    path = Path(tempfile.mkdtemp()) / "decode_base.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("decode_base", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.decode


def rollout(name, cfg, path, problems, model, tok, counts, lim, rows_list, max_new, engines, base_decode) -> dict:
    from rlvr.rollout import SamplingParams, build_engine
    from rlvr.rollout import loop as loop_module

    g = cfg.rollout.group_size
    out = {}
    for rows in rows_list:
        prompts = [problems[i % len(problems)] for i in range(max(1, rows // g))]
        params = SamplingParams(group_size=g, temperature=cfg.rollout.temperature, top_p=1.0, max_new_tokens=max_new)
        bound = decode_bound(counts, lim, rows)
        for label in engines:
            if label in ("hf", "loop@base") and rows != rows_list[0]:
                continue  # the references run at the step's rows only (at 128 rows they take minutes)
            engine_name = "loop" if label == "loop@base" else label
            try:
                rollout_cfg = dataclasses.replace(cfg.rollout, engine=engine_name)
                engine = build_engine(
                    rollout_cfg, model, tok, name=engine_name, model_dir=path, seed=0, dtype="float32"
                )
            except Exception as exc:  # noqa: BLE001 - a missing engine is a row, not a crash
                out[f"{label}@{rows}"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                continue
            saved = loop_module.decode
            if label == "loop@base":
                if base_decode is None:
                    continue
                loop_module.decode = base_decode
            try:
                engine.generate(prompts[:1], dataclasses.replace(params, max_new_tokens=4))  # warm-up
                times = []
                for _ in range(2):  # the first call, then again: what a run's later steps see
                    with torch.no_grad():  # the weights changed in place, as by an optimizer step: the
                        for param in model.parameters():  # decode packs them again, as in training
                            param.mul_(1.0)
                    torch.manual_seed(0)
                    t0 = time.perf_counter()
                    done = engine.generate(prompts, params)
                    times.append(time.perf_counter() - t0)
                first, seconds = times
            except Exception as exc:  # noqa: BLE001 - an engine that fails at this size is a row, not a crash
                out[f"{label}@{rows}"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                print(f"  [{name}] rollout {label} rows {rows}: {type(exc).__name__}: {exc}"[:300], flush=True)
                continue
            finally:
                loop_module.decode = saved
            tokens = sum(len(c.token_ids) for c in done)
            tok_s = tokens / seconds
            out[f"{label}@{rows}"] = {
                "engine": label,
                "rows": len(done),
                "tokens": tokens,
                "seconds": round(seconds, 2),
                "tok_s": round(tok_s, 1),
                "first_call_tok_s": round(tokens / first, 1),
                "bound_tok_s": round(bound, 1),
                "of_bound": round(tok_s / bound, 3),
            }
            print(
                f"  [{name}] rollout {label:10s} rows {len(done):4d}: {tok_s:7.1f} tok/s = "
                f"{tok_s / bound:.0%} of {bound:.0f} (first call {tokens / first:.1f})",
                flush=True,
            )
            del engine
    return out


def unchunked_scores(model, batch, temperature, *, dtype="float32", chunk_tokens=None):
    """completion_scores as rlvr computed it before: the whole (B, K, V) logits, gathered into a
    second (B, T, V), then log-softmax in row chunks (the 'before' variant)."""
    from rlvr.algos import token_logprobs
    from rlvr.scoring import compute, forward_logits

    batch = batch.to(next(model.parameters()).device)
    with compute(model, dtype):
        logits = forward_logits(model, batch)  # (B, K, V)
    t = batch.targets.shape[1]
    offset = batch.input_ids.shape[1] - logits.shape[1]
    idx = (batch.starts[:, None] - offset + torch.arange(t)[None, :]).clamp(max=logits.shape[1] - 1)
    gathered = logits.gather(1, idx[..., None].expand(-1, -1, logits.shape[-1]))  # (B, T, V)
    return token_logprobs(gathered / temperature, batch.targets)


def update(name, cfg, model, tok, completions, counts, lim, budget: int) -> dict:
    import copy

    import rlvr.train.update as upd
    from rlvr.kernels import release_freed_memory
    from rlvr.scoring import completion_logprobs
    from rlvr.train.memory import peak_rss_bytes, reset_peak_memory

    n = len(completions)
    all_tokens = [len(c.prompt_ids) + len(c.token_ids) for c in completions]
    scored = sum(len(c.token_ids) for c in completions)
    attention = sum(6 * counts["layers"] * counts["hidden"] * L * L / 2 for L in all_tokens)  # causal: half
    train_flops = 6 * counts["body"] * sum(all_tokens) + 6 * counts["head"] * scored + attention
    adv = torch.linspace(-1, 1, n)[torch.randperm(n, generator=torch.Generator().manual_seed(0))]
    s = upd.update_settings(cfg.algo, cfg.train, cfg.rollout, cfg.model.dtype)
    s = dataclasses.replace(s, ppo_epochs=1, mini_batches=1)
    variants = {
        "before": (s, unchunked_scores),
        "chunked": (s, upd.completion_scores),
        "packed": (dataclasses.replace(s, micro_batch_size=0, micro_batch_tokens=budget), upd.completion_scores),
    }
    out = {
        "sequences": n,
        "tokens": sum(all_tokens),
        "scored_tokens": scored,
        "model_gflop": round(train_flops / 1e9, 1),
        "micro_batch_size": s.micro_batch_size,
        "micro_batch_tokens": budget,
    }
    saved = upd.completion_scores
    for label, (settings, scorer) in variants.items():
        release_freed_memory()  # the heap keeps freed blocks (keep_freed_memory): not the last variant's
        m = copy.deepcopy(model)
        opt = upd.build_optimizer(cfg.train, m)
        upd.completion_scores = scorer
        try:
            upd.policy_update(
                m,
                opt,
                completions[:2],
                adv[:2],
                torch.ones(2),
                None,
                tok.pad_token_id,
                settings,
                generator=torch.Generator().manual_seed(0),
            )  # warm-up, optimizer state allocated
            reset_peak_memory()
            calls = []  # the first call maps its memory fresh (a run's first step); the second reuses it
            for _ in range(2):
                t0 = time.perf_counter()
                upd.policy_update(
                    m,
                    opt,
                    completions,
                    adv,
                    torch.ones(n),
                    None,
                    tok.pad_token_id,
                    settings,
                    generator=torch.Generator().manual_seed(0),
                )
                calls.append(time.perf_counter() - t0)
        finally:
            upd.completion_scores = saved
        first, seconds = calls
        out[label] = {
            "seconds": round(seconds, 2),
            "gflops": round(train_flops / seconds / 1e9, 1),
            "mfu": round(train_flops / seconds / (lim["matmul_fp32_gflops"] * 1e9), 3),
            "first_call_seconds": round(first, 2),
            "peak_rss_gb": round(peak_rss_bytes() / 1024**3, 3),
        }
        print(
            f"  [{name}] update {label:8s}: {seconds:6.1f} s (first call {first:.1f} s), {out[label]['gflops']} "
            f"GFLOP/s = MFU {out[label]['mfu']:.0%}, peak RSS {out[label]['peak_rss_gb']:.2f} GB",
            flush=True,
        )
        del m, opt
    fwd = 2 * counts["body"] * sum(all_tokens) + 2 * counts["head"] * scored + attention / 3
    model.eval()
    seconds = timed(
        lambda: completion_logprobs(model, completions, tok.pad_token_id, cfg.rollout.temperature),
        min_s=0.0,
        min_reps=1,
    )
    out["logprob_pass"] = {
        "seconds": round(seconds, 2),
        "gflops": round(fwd / seconds / 1e9, 1),
        "mfu": round(fwd / seconds / (lim["matmul_fp32_gflops"] * 1e9), 3),
    }
    print(f"  [{name}] log-prob pass: {seconds:.1f} s = MFU {out['logprob_pass']['mfu']:.0%}", flush=True)
    return out


def step_shares(name: str, threads: int, steps: int) -> dict:
    """A short `rlvr train` of the model's config: each phase's share of the step."""
    from rlvr.runlog import read_jsonl

    run_dir = Path(tempfile.mkdtemp(prefix="roofline_run_"))
    args = [
        sys.executable,
        "-m",
        "rlvr.cli",
        "train",
        f"train.steps={steps}",
        "eval.n=1",
        "eval.every=0",
        "ckpt.every=0",
        "log.report=false",
        "log.tensorboard=false",
        "run.progress=false",
        f"run.dir={run_dir}",
        f"train.threads={threads}",
    ]
    if name == "smollm2":
        args[4:4] = ["--config", str(ROOT / "configs" / "smollm2.yaml")]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr[-800:]}
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "perf/step_s" in r]
    mean = lambda key: sum(r.get(key, 0.0) for r in rows) / len(rows)  # noqa: E731
    step = mean("perf/step_s")
    phases = {k.split("/")[1][:-2]: mean(k) for k in ("time/rollout_s", "time/reward_s", "time/ref_s", "time/update_s")}
    out = {"steps": len(rows), "step_s": round(step, 2), **{f"{k}_s": round(v, 2) for k, v in phases.items()}}
    out["other_share"] = round(max(0.0, step - sum(phases.values())) / step, 3)
    print(
        f"  [{name}] step {step:.1f} s: "
        + ", ".join(f"{k} {v / step:.0%}" for k, v in phases.items())
        + f", other {out['other_share']:.0%}",
        flush=True,
    )
    return out


def rescale(result: dict, counts: dict, lims: list[dict]) -> None:
    """Every ratio against the highest limits measured in the run (before the update, after it and
    after the rollouts): the host is shared and its matmul peak moves by up to 2x within minutes, so
    the stricter ratio is the one reported."""
    high = {k: max(lim[k] for lim in lims) for k in lims[0]}
    result["limits"], result["limits_measured"] = high, lims
    peak = high["matmul_fp32_gflops"]
    for entry in [*(result["update"][v] for v in ("before", "chunked", "packed")), result["update"]["logprob_pass"]]:
        entry["mfu"] = round(entry["gflops"] / peak, 3)
    result["decode_bound_tok_s"] = {
        r: round(decode_bound(counts, high, int(r)), 1) for r in result["decode_bound_tok_s"]
    }
    for entry in result["rollout"].values():
        if "tok_s" in entry:
            entry["bound_tok_s"] = round(decode_bound(counts, high, entry["rows"]), 1)
            entry["of_bound"] = round(entry["tok_s"] / entry["bound_tok_s"], 3)


def bench_model(name: str, threads: int, args) -> dict:
    from bench_rollout import model_setup

    from rlvr.models import load_model
    from rlvr.rollout import SamplingParams, build_engine

    torch.set_num_threads(threads)
    cfg, path, problems = model_setup(name, threads)
    torch.set_num_threads(threads)
    model, tok = load_model(path, "float32")
    model.eval()
    counts = param_counts(model)
    lim = limits(model.config)
    print(f"[{name}, {threads} thread(s)] limits {lim}", flush=True)
    rows_step = cfg.rollout.batch_size * cfg.rollout.group_size
    max_new = args.max_new_tokens or cfg.rollout.max_new_tokens
    result = {
        "threads": threads,
        "params": counts["params"],
        "limits": lim,
        "max_new_tokens": max_new,
        "decode_bound_tok_s": {str(r): round(decode_bound(counts, lim, r), 1) for r in (rows_step, 128)},
    }
    # the update's batch: what the loop engine samples for one step of the config
    engine = build_engine(dataclasses.replace(cfg.rollout, engine="loop"), model, tok, name="loop", dtype="float32")
    torch.manual_seed(0)
    params = SamplingParams(
        group_size=cfg.rollout.group_size,
        temperature=cfg.rollout.temperature,
        max_new_tokens=cfg.rollout.max_new_tokens,
    )
    completions = engine.generate(problems[: cfg.rollout.batch_size * (2 if args.quick else 1)], params)
    longest = max(len(c.prompt_ids) + len(c.token_ids) for c in completions)
    budget = args.micro_batch_tokens or max(longest, (cfg.train.micro_batch_size or 4) * longest)
    result["update"] = update(name, cfg, model, tok, completions, counts, lim, budget)
    lims = [lim, limits(model.config)]
    rows_list = sorted({rows_step, *args.rows})
    engines = [e for e in args.engines if not (e == "vllm" and threads != max(args.threads))]
    result["rollout"] = rollout(
        name,
        cfg,
        path,
        problems,
        model,
        tok,
        counts,
        lim,
        rows_list,
        max_new,
        engines,
        load_base_decode(args.base_rev) if "loop@base" in engines else None,
    )
    lims.append(limits(model.config))
    rescale(result, counts, lims)
    print(
        f"[{name}, {threads} thread(s)] limits measured {lims}; ratios against the highest, {result['limits']}:",
        {
            "update.mfu": result["update"]["chunked"]["mfu"],
            **{k: v["of_bound"] for k, v in result["rollout"].items() if "of_bound" in v},
        },
        flush=True,
    )
    if args.step_steps:
        result["step"] = step_shares(name, threads, args.step_steps)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tiny,smollm2")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rows", default="128", help="rollout rows besides the config's step rows")
    ap.add_argument("--engines", default="hf,loop,loop@base,vllm")
    ap.add_argument("--max-new-tokens", type=int, default=0, help="rollout length budget (0 = the config's)")
    ap.add_argument("--micro-batch-tokens", type=int, default=0, help="packed variant's budget (0 = 4 x longest)")
    ap.add_argument("--step-steps", type=int, default=2, help="rlvr train steps for the phase shares (0 = skip)")
    ap.add_argument("--base-rev", default=BASE_REV)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    args.rows = [int(r) for r in args.rows.split(",") if r]
    args.engines = args.engines.split(",")
    if args.quick:
        args.max_new_tokens, args.rows, args.step_steps = args.max_new_tokens or 16, [], 0
    out = {
        "measured": time.strftime("%Y-%m-%d %H:%M"),
        "command": " ".join(sys.argv),
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "models": {},
    }
    for name in args.models.split(","):
        out["models"][name] = {str(t): bench_model(name, t, args) for t in args.threads}
    out["loadavg_end"] = os.getloadavg()
    summary = {}
    for name, by_threads in out["models"].items():
        per = {}
        for threads, r in by_threads.items():
            per[threads] = {
                "update.mfu": r["update"]["chunked"]["mfu"],
                "update.mfu_packed": r["update"]["packed"]["mfu"],
                "update.mfu_before": r["update"]["before"]["mfu"],
                **{
                    f"rollout.{v['engine']}.of_bound@{v['rows']}": v["of_bound"]
                    for v in r["rollout"].values()
                    if "of_bound" in v
                },
            }
        keys = {k for v in per.values() for k in v}
        summary[name] = {"best": {k: max(v[k] for v in per.values() if k in v) for k in sorted(keys)}, **per}
    out["summary"] = summary
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
