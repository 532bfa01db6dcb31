"""PNG plots of a run's metric streams, with alerts and rollbacks marked on the timeline.

Uses matplotlib's object API with the Agg canvas (no pyplot global state,
no display, no network), so it is safe inside a training process.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PlotSpec:
    name: str  # file stem and anchor
    title: str
    keys: list[str]  # metric keys drawn as lines (missing keys are left out)
    ylabel: str = ""
    hlines: dict[str, float] = field(default_factory=dict)  # label -> y


def series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key`; the last row of a step wins (the final eval shares the last step)."""
    by_step: dict[int, float] = {}
    for r in rows:
        v = r.get(key)
        if isinstance(v, str):
            try:
                v = float(v)  # "nan"/"inf" as written by the run log
            except ValueError:
                continue
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            by_step[int(r.get("step", 0))] = float(v)
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def default_specs(
    rows: Sequence[dict[str, Any]], max_new_tokens: int | None, beta: float | None = None
) -> list[PlotSpec]:
    keys = {k for r in rows for k in r}
    components = sorted(
        k
        for k in keys
        if re.fullmatch(r"reward/[^/]+/mean", k) and not k.startswith(("reward/source/", "reward/agreement/"))
    )
    sources = sorted(k for k in keys if re.fullmatch(r"reward/source/[^/]+/mean", k))
    eval_sources = sorted(k for k in keys if re.fullmatch(r"eval/source/[^/]+/accuracy", k))
    specs = [
        PlotSpec("reward", "Reward: total and per component", ["reward/mean", *components], "reward"),
        PlotSpec(
            "accuracy",
            "Accuracy: held-out (greedy) and training (sampled)",
            ["eval/accuracy", *eval_sources, "reward/correct/mean"],
            "fraction correct",
        ),
        PlotSpec(
            "kl",
            "KL to the reference (per token)" + (" - algo.beta=0: not computed" if beta == 0 else ""),
            ["actor/kl"],
            "KL",
        ),
        PlotSpec("entropy", "Policy entropy (per token)", ["actor/entropy"], "nats"),
        PlotSpec(
            "length",
            "Completion length",
            ["rollout/len_mean", "rollout/len_p90"],
            "tokens",
            {"max_new_tokens": float(max_new_tokens)} if max_new_tokens else {},
        ),
        PlotSpec("zero_std", "Groups with no reward variance", ["rollout/zero_std_frac"], "fraction of groups"),
        PlotSpec(
            "agreement",
            "Agreement between reward components (rank correlation over the batch)",
            ["reward/agreement/mean", *sorted(k for k in keys if k.startswith("reward/agreement/") and "_vs_" in k)],
            "Spearman rho",
        ),
        PlotSpec("throughput", "Rollout throughput", ["perf/rollout_tok_s"], "tokens / s"),
        PlotSpec("sync", "Weight sync, trainer to rollout engine", ["sync/seconds"], "seconds"),
        PlotSpec(
            "parity",
            "Engine/trainer log-prob gap on the sampled tokens (rlvr.train.parity)",
            ["rollout/parity_gap_max", "rollout/parity_gap_p99", "rollout/parity_gap_mean"],
            "|log-prob difference|",
        ),
        PlotSpec("loss", "Policy loss and gradient norm", ["actor/loss", "actor/grad_norm"], ""),
    ]
    if len(sources) > 1:
        specs.insert(1, PlotSpec("sources", "Reward by data source", sources, "reward"))
    return specs


def render_png(spec: PlotSpec, rows: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]]) -> bytes | None:
    """One plot as PNG bytes, or None when none of its keys was logged."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    drawn = [(k, *series(rows, k)) for k in spec.keys]
    drawn = [(k, s, v) for k, s, v in drawn if s]
    if not drawn:
        return None
    fig = Figure(figsize=(6.4, 3.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for key, steps, values in drawn:
        finite = [(s, v) for s, v in zip(steps, values) if math.isfinite(v)]
        marker = "o" if len(finite) < 30 else None
        ax.plot([s for s, _ in finite], [v for _, v in finite], marker=marker, markersize=3, linewidth=1.4, label=key)
        for s, v in zip(steps, values):
            if not math.isfinite(v):
                ax.axvline(s, color="black", linewidth=0.8, linestyle=":")
    for label, y in spec.hlines.items():
        ax.axhline(y, color="grey", linewidth=0.8, linestyle="--", label=label)
    _mark_events(ax, events)
    ax.set_title(spec.title, fontsize=10)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel(spec.ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _mark_events(ax, events: Sequence[dict[str, Any]]) -> None:
    seen: set[str] = set()
    for e in events:
        if e.get("step") is None:
            continue
        if e["kind"] == "rollback":
            style, label = dict(color="red", linestyle="--", linewidth=1.2), "rollback"
        elif e["kind"] == "alert":
            style, label = dict(color="orange", linestyle=":", linewidth=1.0), "alert"
        elif e["kind"] == "resume":
            style, label = dict(color="green", linestyle="-.", linewidth=0.8), "resume"
        else:
            continue
        ax.axvline(e["step"], label=None if label in seen else label, **style)
        seen.add(label)
