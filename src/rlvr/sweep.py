"""Sweeps: a grid (or random samples) of config values, each a normal run, compared at the end.

    trials = grid(["algo.beta=0.001,0.003,0.01,0.03", "train.lr=1e-5,3e-5"])   # 8 override lists
    results = run_trials(files, base_overrides, trials, out, local, parallel=1)  # Ray Tune runs them
    comparison = compare(results, metric="eval_after")                            # sweep.json, sweep.html

Each trial is `rlvr train` with its overrides and its own run directory (out/<trial>; `out` may be
a URL, each trial's run.dir then a URL under it: rlvr.storage; Tune's own state stays in `local`), run by Ray Tune as a trial (in parallel as the cluster allows: `parallel` at once; one after another
by default, as an embedded run takes the machine). A trial that diverges or fails is reported with
its error; the others go on. The comparison ranks the trials by held-out accuracy after training
and tests each against the best on the same held-out problems (paired bootstrap, exact McNemar).
"""

from __future__ import annotations

import html
import itertools
import json
import random
import re
from pathlib import Path
from typing import Any

from rlvr.configlib import ConfigError
from rlvr.ops.plots import PlotSpec, render_png
from rlvr.stats import paired_report
from rlvr.urls import is_url, join, read_text


def jsonl(location: str | Path) -> list[dict[str, Any]]:
    """A run file's rows, by path or URL (none when it is not there); a line cut short is passed over."""
    rows = []
    for line in (read_text(location) or "").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def split_values(text: str) -> list[str]:
    """'a,b,[c,d]' -> ['a', 'b', '[c,d]']: commas inside brackets or braces belong to one value."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [v.strip() for v in out]


def axes(args: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """KEY=V1,V2,... arguments -> the swept axes; KEY=VALUE ones stay fixed overrides."""
    swept: dict[str, list[str]] = {}
    fixed: list[str] = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ConfigError(f"{arg!r}: expected KEY=VALUE or KEY=V1,V2,...")
        values = split_values(value)
        if len(values) > 1:
            if key in swept:
                raise ConfigError(f"{key}: swept twice; give all its values in one KEY=V1,V2,...")
            swept[key] = values
        else:
            fixed.append(arg)
    if not swept:
        raise ConfigError("rlvr sweep needs at least one KEY=V1,V2,... to sweep")
    return swept, fixed


def trials(swept: dict[str, list[str]], samples: int = 0, seed: int = 0) -> list[list[str]]:
    """The grid's override lists (every combination), or `samples` of them drawn at random."""
    grid = [[f"{k}={v}" for k, v in zip(swept, combo)] for combo in itertools.product(*swept.values())]
    if samples:
        grid = random.Random(seed).sample(grid, min(samples, len(grid)))
    return grid


def trial_name(overrides: list[str]) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "__".join(overrides))[:120]


def run_trials(
    config_files: list[str],
    fixed: list[str],
    grid: list[list[str]],
    out: str | Path,
    local: Path,
    *,
    parallel: int = 1,
    profile: str | None = None,
) -> list[dict[str, Any]]:
    """Every trial through Ray Tune, each in its run directory under `out` (a directory or a URL);
    `local`: where Tune keeps its own state. Each trial's result: its overrides, run directory,
    status, summary (or error)."""
    import ray
    from ray import tune

    import os

    out = out if is_url(out) else Path(out).resolve()
    local = Path(local).resolve()
    local.mkdir(parents=True, exist_ok=True)
    files = [str(Path(f).resolve()) for f in config_files]
    cwd = os.getcwd()

    def trial(space: dict) -> None:
        # in Tune's worker processes: the sweep's own process imports no torch (0.05 s, 5.2 s with them)
        from rlvr.config import load_config
        from rlvr.assembly import train

        os.chdir(cwd)  # Tune starts a trial in a directory of its own; relative paths mean the caller's
        overrides = [
            *fixed,
            *space["overrides"],
            f"run.dir={join(out, trial_name(space['overrides']))}",
            "run.progress=false",
        ]
        summary = train(load_config(files, overrides, profile=profile))
        after = (summary.get("eval_after") or {}).get("accuracy")
        tune.report(
            {
                "status": summary["status"],
                "eval_after": after if after is not None else float("nan"),
                "steps": summary.get("steps") or 0,
            }
        )

    own = not ray.is_initialized()
    if own:
        ray.init(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        tuner = tune.Tuner(
            tune.with_resources(trial, {"cpu": 1}),
            param_space={"overrides": tune.grid_search(grid)},
            tune_config=tune.TuneConfig(max_concurrent_trials=parallel),
            run_config=tune.RunConfig(
                name="tune",
                storage_path=str(local),
                verbose=0,
                failure_config=tune.FailureConfig(max_failures=0, fail_fast=False),
            ),
        )
        results = tuner.fit()
    finally:
        if own:
            ray.shutdown()
    rows = []
    for r in results:
        overrides = r.config["overrides"]
        run_dir = join(out, trial_name(overrides))
        text = read_text(join(run_dir, "summary.json"))
        summary = json.loads(text) if text is not None else None
        status = summary["status"] if summary else "failed"
        rows.append(
            {
                "overrides": overrides,
                "run_dir": str(run_dir),
                "status": "failed" if r.error else status,
                "error": f"{type(r.error).__name__}: {r.error}".splitlines()[0][:300] if r.error else None,
                "summary": summary,
            }
        )
    return rows


def outcomes(run_dir: str | Path) -> dict[str, float] | None:
    """The final evaluation's per-problem correctness of a run (eval.jsonl), by problem id."""
    rows = jsonl(join(run_dir, "eval.jsonl"))
    if not rows:
        return None
    last = max(r["step"] for r in rows)
    return {r["id"]: float(r["correct"]) for r in rows if r["step"] == last and last > 0}


def compare(results: list[dict[str, Any]], *, alpha: float = 0.05) -> dict[str, Any]:
    """Rank the completed trials by held-out accuracy after training; each against the best, paired."""

    def accuracy(r: dict) -> float | None:
        return ((r["summary"] or {}).get("eval_after") or {}).get("accuracy")

    done = [r for r in results if r["status"] == "completed" and accuracy(r) is not None]
    done.sort(key=lambda r: -accuracy(r))
    best = done[0] if done else None
    best_out = outcomes(best["run_dir"]) if best else None
    rows = []
    for r in results:
        row = {
            "trial": trial_name(r["overrides"]),
            "overrides": r["overrides"],
            "status": r["status"],
            "run_dir": r["run_dir"],
            "error": r["error"],
            "eval_after": accuracy(r),
            "eval_before": (((r["summary"] or {}).get("eval_before")) or {}).get("accuracy"),
            "reward_last": (r["summary"] or {}).get("reward_last"),
        }
        mine = outcomes(r["run_dir"]) if r in done else None
        if best_out and mine and r is not best and set(mine) == set(best_out):
            ids = sorted(best_out)
            rep = paired_report(
                [best_out[i] for i in ids], [mine[i] for i in ids], alpha=alpha, iterations=10000, seed=0
            )
            row["vs_best"] = {"diff": rep["diff"], "ci95": rep["ci"], "mcnemar_p": rep["mcnemar_p"]}
        rows.append(row)
    rows.sort(key=lambda x: (x["eval_after"] is None, -(x["eval_after"] or 0)))
    return {
        "best": trial_name(best["overrides"]) if best else None,
        "trials": rows,
        "failed": sum(r["status"] != "completed" for r in results),
    }


def write_report(comparison: dict[str, Any], out_dir: Path) -> Path:
    """sweep.html: the table, and the curves of every trial side by side (reward, accuracy, KL)."""
    import base64

    merged: dict[str, list[dict]] = {}
    for t in comparison["trials"]:
        for row in jsonl(join(t["run_dir"], "metrics.jsonl")):
            for key in ("reward/mean", "eval/accuracy", "actor/kl"):
                if key in row:
                    merged.setdefault(key, []).append({"step": row["step"], t["trial"]: row[key]})
    images = []
    for key, rows in merged.items():
        names = [t["trial"] for t in comparison["trials"]]
        png = render_png(PlotSpec(key.replace("/", "_"), key, names, ylabel=key), rows, [])
        if png:
            images.append(
                f'<img alt="{html.escape(key)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
            )

    def cell(v: Any) -> str:
        return html.escape(f"{v:.3f}" if isinstance(v, float) else str(v if v is not None else ""))

    head = "<tr><th>trial</th><th>status</th><th>held-out before</th><th>after</th><th>vs best [95% CI]</th><th>p</th></tr>"

    def versus(vs: dict | None) -> str:
        return "" if not vs else f"{vs['diff']:+.3f} [{vs['ci95'][0]:+.3f}, {vs['ci95'][1]:+.3f}]"

    body = ""
    for t in comparison["trials"]:
        vs = t.get("vs_best")
        body += (
            f"<tr><td>{cell(t['trial'])}</td><td>{cell(t['error'] or t['status'])}</td>"
            f"<td>{cell(t['eval_before'])}</td><td>{cell(t['eval_after'])}</td>"
            f"<td>{cell(versus(vs))}</td><td>{cell(vs['mcnemar_p']) if vs else ''}</td></tr>"
        )
    page = (
        f"<!doctype html><meta charset=utf-8><title>rlvr sweep</title><h1>rlvr sweep</h1>"
        f"<p>best: {cell(comparison['best'])}; failed trials: {comparison['failed']}</p>"
        f"<table border=1 cellpadding=4>{head}{body}</table>{''.join(images)}"
    )
    path = Path(out_dir) / "sweep.html"
    path.write_text(page)
    return path
