"""`report.html`: a picture of a run that a person can read in a minute.

One self-contained page (plots inlined as base64 PNG, inline CSS and a few
lines of inline script, nothing fetched from the network): headline figures,
reward per component, accuracy, KL, entropy, length mean and P90,
zero-variance fraction, throughput, alerts and rollbacks marked on every
plot and listed on a timeline, the recommended inference length, and a
filterable table of sample completions with their reward breakdowns. The
PNGs are also written to `<run dir>/report/`.
"""

from __future__ import annotations

import base64
import html
import json
import math
import statistics
from pathlib import Path
from typing import Any

import yaml

from rlvr.ops.plots import default_specs, render_png, series
from rlvr.runlog import read_jsonl

MAX_SAMPLES = 2000  # newest rows shown in the table
_EVENT_KINDS = (
    "alert",
    "rollback",
    "resume",
    "failed",
    "checkpoint_skipped",
    "fault_injected",
    "skipped_update",
    "invalid_samples",
    "sampling_shortfall",
    "webhook",
    "worker_failed",
    "worker_restarted",
    "worker_timeout",
    "trainer_restarted",
    "ahead_dropped",
)


def recommended_length(rows: list[dict[str, Any]], max_new_tokens: int | None) -> dict[str, Any] | None:
    """max_new_tokens to use at inference: 1.2 x the P90 completion length over the last 10 steps."""
    steps, p90 = series(rows, "rollout/len_p90")
    if not steps:
        return None
    recent = p90[-10:]
    value = int(math.ceil(1.2 * statistics.median(recent)))
    _, trunc = series(rows, "rollout/truncated_frac")
    truncated = statistics.mean(trunc[-10:]) if trunc else 0.0
    return {
        "tokens": value,
        "p90": statistics.median(recent),
        "truncated_frac": truncated,
        "max_new_tokens": max_new_tokens,
        "steps": len(recent),
    }


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def sync_summary(rows: list[dict[str, Any]]) -> str | None:
    """The run's weight syncs in a line: count, method, bytes and seconds each (medians), mismatches."""
    syncs = [r for r in rows if "sync/method" in r]
    if not syncs:
        return None
    methods = sorted({r["sync/method"] for r in syncs})
    mb = statistics.median(r.get("sync/bytes", 0.0) for r in syncs) / 2**20
    s = statistics.median(r.get("sync/seconds", 0.0) for r in syncs)
    bad = sum(r.get("sync/checksum_mismatch", 0.0) for r in syncs)
    return (
        f"{len(syncs)} x {'/'.join(methods)}, {mb:,.1f} MiB in {s:.3f} s each (median); "
        f"{bad:.0f} checksum mismatch{'es' if bad != 1 else ''}"
    )


def _headline(
    summary: dict[str, Any], rec: dict[str, Any] | None, n_alerts: int, n_rollbacks: int, sync: str | None = None
) -> str:
    cells = [
        ("status", summary.get("status", "running or killed")),
        ("steps", summary.get("steps", "?")),
        (
            "wall time",
            f"{summary['wall_time_s']:.0f} s" if isinstance(summary.get("wall_time_s"), (int, float)) else "?",
        ),
    ]
    before, after = summary.get("eval_before") or {}, summary.get("eval_after") or {}
    if before.get("accuracy") is not None:
        acc = f"{before['accuracy']:.1%}"
        if after.get("accuracy") is not None:
            acc += f" &rarr; {after['accuracy']:.1%}"
        change = summary.get("eval_change")
        p = f", McNemar p = {change['mcnemar_p']:.2g}" if change else ""
        cells.append(("held-out accuracy", acc + f" (n={after.get('n') or before.get('n')}{p})"))
    cells += [("alerts", n_alerts), ("rollbacks", n_rollbacks)]
    if sync:
        cells.append(("weight sync", sync))
    if rec:
        cells.append(("recommended max_new_tokens", rec["tokens"]))
    return "".join(
        f'<div class="card"><div class="k">{_esc(k)}</div><div class="v">{v if k == "held-out accuracy" else _esc(v)}</div></div>'
        for k, v in cells
    )


def _timeline(events: list[dict[str, Any]]) -> str:
    rows = []
    for e in events:
        if e.get("kind") not in _EVENT_KINDS:
            continue
        detail = e.get("message") or e.get("reason") or e.get("error") or e.get("problem") or e.get("checkpoint") or ""
        if e["kind"] == "rollback":
            detail = f"to step {e.get('to_step')}: {detail} (lr x{e.get('lr_scale')})"
        cls = {"rollback": "bad", "failed": "bad", "alert": "warn"}.get(e["kind"], "")
        rows.append(
            f'<tr class="{cls}"><td>{_esc(e.get("step"))}</td><td>{_esc(e["kind"])}</td>'
            f"<td>{_esc(e.get('rule') or e.get('severity') or '')}</td><td>{_esc(detail)}</td></tr>"
        )
    if not rows:
        return "<p>No alerts, rollbacks or resumes.</p>"
    return (
        '<table class="events"><thead><tr><th>step</th><th>event</th><th>rule</th><th>detail</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _trajectory(turns: list[dict[str, Any]]) -> str:
    """A multi-turn episode, turn by turn: the policy's turns, and what tools and the environment said."""
    parts = []
    for t in turns:
        if t.get("role") == "assistant":
            calls = "".join(
                f'<div class="call">&#8594; {_esc(c.get("name"))}({_esc(c.get("arguments"))})'
                f"{'' if c.get('ok') else ' failed: ' + _esc(c.get('error') or '')}</div>"
                for c in t.get("tool_calls", [])
            )
            parts.append(f'<div class="turn">{_esc(t.get("text", ""))}{calls}</div>')
        else:
            parts.append(f'<div class="env">{_esc(t.get("text", ""))}</div>')
    return "".join(parts)


def _samples(samples: list[dict[str, Any]]) -> str:
    samples = samples[-MAX_SAMPLES:]
    if not samples:
        return "<p>No samples were logged (log.samples_per_step=0).</p>"
    components = sorted({c for s in samples for c in (s.get("components") or {})})
    head = "".join(f"<th>{_esc(c)}</th>" for c in components)
    rows = []
    for s in samples:
        comp = s.get("components") or {}
        cells = "".join(f"<td>{_esc(_fmt(comp.get(c, '')))}</td>" for c in components)
        flags = "" if s.get("valid", True) else f" invalid: {_esc(s.get('error') or '')}"
        text = _trajectory(s["turns"]) if s.get("turns") else _esc(s.get("completion", ""))
        rows.append(
            f'<tr data-step="{_esc(s.get("step"))}"><td>{_esc(s.get("step"))}</td><td>{_esc(s.get("source", ""))}</td>'
            f'<td class="txt">{_esc(s.get("prompt", ""))}</td><td class="txt">{text}</td>'
            f"<td>{_esc(s.get('answer', ''))}</td><td>{_esc(_fmt(s.get('reward', '')))}</td>{cells}"
            f"<td>{_esc(_fmt(s.get('advantage', '')))}</td><td>{_esc(s.get('finish_reason', ''))}{flags}</td></tr>"
        )
    steps = sorted({s.get("step") for s in samples if s.get("step") is not None})
    options = '<option value="">all steps</option>' + "".join(
        f'<option value="{st}">step {st}</option>' for st in steps
    )
    return (
        f'<div class="filters"><label>step <select id="stepFilter">{options}</select></label> '
        '<label>search <input id="textFilter" type="search" placeholder="prompt, completion, answer"></label> '
        '<span id="sampleCount"></span></div>'
        '<div class="scroll"><table id="samples"><thead><tr><th>step</th><th>source</th><th>prompt</th>'
        f"<th>completion</th><th>answer</th><th>reward</th>{head}<th>advantage</th><th>finish</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;background:#fafafa}
h1{margin:0 0 4px}h2{margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}.sub{color:#666}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:16px 0}.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px}
.card .k{font-size:12px;color:#666}.card .v{font-size:18px;font-weight:600}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:12px}
.plots figure{margin:0;background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px}.plots img{width:100%}
table{border-collapse:collapse;font-size:12px;background:#fff}td,th{border:1px solid #ddd;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f0f0f0;position:sticky;top:0}tr.bad td{background:#fde8e8}tr.warn td{background:#fff6e0}
td.txt{font-family:ui-monospace,monospace;white-space:pre-wrap;max-width:420px}.scroll{max-height:640px;overflow:auto}
.filters{margin:8px 0}.turn{border-left:3px solid #4a7;padding-left:4px;margin:2px 0}
.env{border-left:3px solid #999;padding-left:4px;margin:2px 0;color:#555;background:#f4f4f4}.call{color:#146;font-size:11px}.note{background:#eef5ff;border:1px solid #cde;padding:8px 12px;border-radius:6px}
"""

# Filters the sample table; and marks the page for automated checks (plots decoded, no script errors).
_JS = """
window.__errors=[];window.addEventListener('error',function(e){window.__errors.push(String(e.message))});
function filterSamples(){var st=document.getElementById('stepFilter'),tx=document.getElementById('textFilter');
 if(!st)return;var s=st.value,t=tx.value.toLowerCase(),n=0,rows=document.querySelectorAll('#samples tbody tr');
 rows.forEach(function(r){var ok=(!s||r.dataset.step===s)&&(!t||r.textContent.toLowerCase().indexOf(t)>=0);
 r.style.display=ok?'':'none';if(ok)n++});document.getElementById('sampleCount').textContent=n+' of '+rows.length+' samples';}
window.addEventListener('load',function(){
 var st=document.getElementById('stepFilter');if(st){st.addEventListener('change',filterSamples);
 document.getElementById('textFilter').addEventListener('input',filterSamples);filterSamples();}
 var imgs=[].slice.call(document.querySelectorAll('img.plot'));
 var drawn=imgs.filter(function(i){return i.complete&&i.naturalWidth>0}).length;
 document.body.setAttribute('data-plots',drawn+'/'+imgs.length);
 document.body.setAttribute('data-errors',String(window.__errors.length));
 document.body.setAttribute('data-ready','1');});
"""


def build_report(run_dir: Path) -> tuple[str, dict[str, bytes]]:
    """The HTML page and the PNG plots (name -> bytes) of the run in `run_dir`."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").exists():
        raise FileNotFoundError(f"{run_dir}: no metrics.jsonl here; give the directory of a run (runs/<name>)")
    rows = read_jsonl(run_dir / "metrics.jsonl")
    events = read_jsonl(run_dir / "events.jsonl")
    samples = read_jsonl(run_dir / "samples.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    config = yaml.safe_load((run_dir / "config.yaml").read_text()) if (run_dir / "config.yaml").exists() else {}
    max_new = (config.get("rollout") or {}).get("max_new_tokens")
    rec = recommended_length(rows, max_new)
    marks = [e for e in events if e.get("kind") in ("alert", "rollback", "resume")]

    plots: dict[str, bytes] = {}
    figures = []
    for spec in default_specs(rows, max_new, (config.get("algo") or {}).get("beta")):
        png = render_png(spec, rows, marks)
        if png is None:
            continue
        plots[spec.name] = png
        data = base64.b64encode(png).decode()
        figures.append(
            f'<figure id="plot-{spec.name}"><img class="plot" alt="{_esc(spec.title)}" '
            f'src="data:image/png;base64,{data}"></figure>'
        )

    n_alerts = sum(e.get("kind") == "alert" for e in events)
    n_rollbacks = sum(e.get("kind") == "rollback" for e in events)
    rec_html = "<p>No rollout steps logged yet.</p>"
    if rec:
        trunc = (
            f" {rec['truncated_frac']:.0%} of recent completions were cut at max_new_tokens={rec['max_new_tokens']}, "
            "so the true length is longer: raise rollout.max_new_tokens before trusting this figure."
            if rec["truncated_frac"] > 0.01
            else ""
        )
        rec_html = (
            f'<p class="note">Use <b>max_new_tokens = {rec["tokens"]}</b> for inference: 1.2 &times; the P90 '
            f"completion length ({rec['p90']:.0f} tokens, median over the last {rec['steps']} steps).{_esc(trunc)}</p>"
        )
    name = config.get("run", {}).get("name") if isinstance(config.get("run"), dict) else None
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>rlvr report: {_esc(name or run_dir.name)}</title><style>{_CSS}</style><script>{_JS}</script></head>
<body><h1>rlvr run report</h1><div class="sub">{_esc(run_dir.resolve())} &middot; model {_esc((config.get("model") or {}).get("name", "?"))}
&middot; task {_esc((config.get("task") or {}).get("name", "?"))} &middot; seed {_esc(config.get("seed", "?"))}</div>
<div class="cards">{_headline(summary, rec, n_alerts, n_rollbacks, sync_summary(rows))}</div>
<h2>Recommended inference length</h2>{rec_html}
<h2>Training curves</h2><p class="sub">Red dashed: rollback &middot; orange dotted: alert &middot; green: resume &middot;
black dotted: a non-finite value.</p><div class="plots">{"".join(figures) or "<p>No metrics logged yet.</p>"}</div>
<h2>Timeline: alerts, rollbacks, resumes</h2>{_timeline(events)}
<h2>Sample completions</h2>{_samples(samples)}
</body></html>
"""
    return page, plots


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write `report.html` (default: in the run directory) and `report/<plot>.png`; return the page's path."""
    run_dir = Path(run_dir)
    page, plots = build_report(run_dir)
    out = Path(out) if out else run_dir / "report.html"
    png_dir = run_dir / "report"
    png_dir.mkdir(parents=True, exist_ok=True)
    for name, png in plots.items():
        (png_dir / f"{name}.png").write_bytes(png)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page)
    tmp.replace(out)
    return out


def write_report_safely(run_dir: Path, ui) -> Path | None:
    """At the end of `rlvr train`: a report that fails to render is a warning, never a failed run."""
    try:
        path = write_report(run_dir)
    except Exception as exc:  # noqa: BLE001 - the run itself is done; say what went wrong and move on
        ui.warn(f"could not write the run report: {type(exc).__name__}: {exc}; try `rlvr report {run_dir}`")
        return None
    ui.print(f"report: {path}")
    return path
