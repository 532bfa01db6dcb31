"""What a person sees: a config banner, a live progress bar, a summary table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table


class RunConsole:
    def __init__(self, enabled: bool = True):
        self.console = Console(highlight=False)
        self.enabled = enabled
        self._progress: Progress | None = None
        self._task = None
        self._plain_every = 0  # output is not a terminal: a plain line every this many steps instead of a bar
        self._total = 0

    def print(self, *args: Any) -> None:
        if self.enabled:
            self.console.print(*args)

    def warn(self, message: str) -> None:
        # warnings always show, even with progress off
        self.console.print(f"[bold yellow]warning:[/] {message}")

    def start(self, total: int, completed: int = 0) -> None:
        if not self.enabled:
            return
        if not self.console.is_terminal:  # a log file or CI: a bar squeezed to 80 columns says nothing
            self._plain_every, self._total = max(1, total // 20), total
            return
        self._progress = Progress(
            TextColumn("[bold]GRPO"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task("train", total=total, completed=completed, status="")

    def update(self, step: int, metrics: dict[str, float], accuracy: float | None) -> None:
        if self._progress is None and not self._plain_every:
            return
        status = (
            f"reward {metrics.get('reward/mean', 0):.3f}  correct {metrics.get('reward/correct/mean', 0):.2f}"
            f"  kl {metrics.get('actor/kl', 0):.4f}"
        )
        if accuracy is not None:
            status += f"  held-out acc {accuracy:.1%}"
        if self._progress is not None:
            self._progress.update(self._task, completed=step, status=status)
        elif step % self._plain_every == 0 or "eval/accuracy" in metrics or step == self._total:
            self.console.print(f"GRPO step {step}/{self._total}  {status}")

    def stop(self) -> None:
        self._plain_every = 0
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def summary(self, summary: dict[str, Any], run_dir) -> None:
        table = Table(title="rlvr train: summary", show_header=True)
        table.add_column("")
        table.add_column("value", justify="right")
        before, after = summary.get("eval_before") or {}, summary.get("eval_after") or {}
        if before and after:
            table.add_row(
                f"held-out accuracy (greedy, n={after['n']})", f"{before['accuracy']:.1%} -> {after['accuracy']:.1%}"
            )
        change = summary.get("eval_change")
        if change:
            table.add_row(
                "change [95% CI], McNemar p",
                f"{change['diff']:+.1%} [{change['ci95'][0]:+.1%}, "
                f"{change['ci95'][1]:+.1%}], p = {change['mcnemar_p']:.2g}",
            )
        for key in ("reward_first", "reward_last"):
            if summary.get(key) is not None:  # None: no step ran (train.steps=0)
                table.add_row(key.replace("_", " "), f"{summary[key]:.3f}")
        table.add_row("steps", str(summary.get("steps")))
        table.add_row("wall time", f"{summary.get('wall_time_s', 0):.0f} s")
        table.add_row("status", str(summary.get("status")))
        table.add_row("run directory", str(run_dir))
        table.add_row("final model", str(run_dir / "model"))
        self.console.print(table)
