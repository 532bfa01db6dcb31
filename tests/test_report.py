"""report.html: built from a run directory, self-contained, and drawn by a real headless browser."""

from __future__ import annotations

import math
import re
import shutil
import subprocess

import pytest

from rlvr.cli import main
from rlvr.ops.report import write_report
from rlvr.runlog import RunLog

PNG = b"\x89PNG\r\n\x1a\n"
PLOTS = ["reward", "accuracy", "kl", "entropy", "length", "zero_std", "agreement", "throughput", "loss"]


@pytest.fixture
def run_dir(tmp_path):
    """A run's files as the trainer writes them: 40 steps, evals, an alert, a rollback, samples."""
    run = tmp_path / "run"
    log = RunLog(
        run,
        {
            "seed": 3,
            "model": {"name": "tiny"},
            "task": {"name": "arithmetic"},
            "rollout": {"max_new_tokens": 48},
            "run": {"name": "demo"},
        },
    )
    log.metrics(0, {"eval/accuracy": 0.2})
    for s in range(1, 41):
        log.metrics(
            s,
            {
                "reward/mean": 0.3 + 0.01 * s,
                "reward/correct/mean": 0.25 + 0.01 * s,
                "reward/format/mean": 0.9,
                "actor/kl": 0.001 * s,
                "actor/entropy": 1.5 - 0.02 * s,
                "actor/loss": 0.01 * math.sin(s),
                "actor/grad_norm": 0.5,
                "rollout/len_mean": 20 + 0.2 * s,
                "rollout/len_p90": 30 + 0.1 * s,
                "rollout/truncated_frac": 0.0,
                "rollout/zero_std_frac": 0.4 - 0.005 * s,
                "perf/rollout_tok_s": 900.0 + 5 * s,
                "reward/agreement/mean": 0.6 - 0.01 * s,
                "reward/agreement/correct_vs_format": 0.6 - 0.01 * s,
                **({"eval/accuracy": 0.2 + 0.01 * s} if s % 10 == 0 else {}),
            },
        )
        log.samples(
            s,
            [
                {
                    "source": "arithmetic",
                    "prompt": f"{s}+1=",
                    "completion": "<think>x</think><answer>1</answer>",
                    "answer": str(s + 1),
                    "reward": 0.1,
                    "components": {"correct": 0.0, "format": 1.0},
                    "valid": True,
                    "advantage": -0.5,
                    "finish_reason": "stop",
                }
            ],
        )
    log.samples(
        40,
        [
            {
                "prompt": "<script>alert(1)</script>",
                "completion": "</td></tr><b>bold",
                "reward": 0.0,
                "components": {"correct": 0.0, "format": 0.0},
                "valid": False,
                "error": "timeout",
            }
        ],
    )
    log.event("alert", step=12, rule="throughput", message="step 12: throughput dropped", severity="warning")
    log.event("rollback", step=20, to_step=18, rule="nonfinite", reason="step 20: non-finite loss", lr_scale=0.5)
    log.summary(
        {
            "status": "completed",
            "steps": 40,
            "wall_time_s": 61.0,
            "eval_before": {"accuracy": 0.2, "n": 50},
            "eval_after": {"accuracy": 0.6, "n": 50},
        }
    )
    log.close()
    return run


def test_report_is_one_self_contained_page_with_its_plots(run_dir):
    page_path = write_report(run_dir)
    page = page_path.read_text()
    assert page_path == run_dir / "report.html"
    assert sorted(p.stem for p in (run_dir / "report").glob("*.png")) == sorted(PLOTS)
    assert all((run_dir / "report" / f"{n}.png").read_bytes().startswith(PNG) for n in PLOTS)
    assert page.count('<img class="plot"') == len(PLOTS) and page.count("data:image/png;base64,") == len(PLOTS)
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing fetched from anywhere
    assert "20.0% &rarr; 60.0%" in page and "Use <b>max_new_tokens = 41</b>" in page  # ceil(1.2 x P90 34)
    assert "step 20: non-finite loss" in page and "step 12: throughput dropped" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "invalid: timeout" in page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="chromium not installed (make test installs it with apt when it can)")
def test_report_renders_in_headless_chromium_with_every_plot_and_no_console_errors(run_dir, tmp_path):
    page = write_report(run_dir)
    flags = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
    ]
    dom = subprocess.run(
        [*flags, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert 'data-ready="1"' in body  # the page's own check ran after load
    assert f'data-plots="{len(PLOTS)}/{len(PLOTS)}"' in body  # every plot decoded, naturalWidth > 0
    assert 'data-errors="0"' in body
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line] == []
    assert "41 of 41 samples" in dom.stdout  # the sample filter script ran
    shot = tmp_path / "report.png"
    subprocess.run(
        [*flags, "--hide-scrollbars", "--window-size=1400,2400", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    from PIL import Image

    with Image.open(shot) as img:
        assert img.size == (1400, 2400)
        assert len(img.convert("RGB").getcolors(maxcolors=1 << 20)) > 50  # drawn content, not a blank page


def test_report_command(run_dir, tmp_path, capsys):
    assert main(["report", str(run_dir), "--out", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").exists() and "wrote" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err
