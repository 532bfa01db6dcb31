"""What a person sees when the output is not a terminal (a log file, CI): plain progress lines."""

from rlvr.console import RunConsole


def test_progress_prints_plain_lines_when_output_is_not_a_terminal(capsys):
    ui = RunConsole(True)
    assert not ui.console.is_terminal  # pytest captures stdout
    ui.start(total=40)
    for step in range(1, 41):  # the driver passes the last evaluation's accuracy on every later step
        metrics = {"reward/mean": step / 40, "reward/correct/mean": 0.5, "actor/kl": 0.0}
        if step == 5:
            metrics["eval/accuracy"] = 0.25
        ui.update(step, metrics, accuracy=0.25 if step >= 5 else None)
    ui.stop()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("GRPO step")]
    # every 40 // 20 = 2 steps, plus the evaluation at step 5
    assert len(lines) == 21
    assert "GRPO step 5/40" in lines[2] and "held-out acc 25.0%" in lines[2]
    assert lines[-1].startswith("GRPO step 40/40  reward 1.000")


def test_disabled_console_prints_nothing(capsys):
    ui = RunConsole(False)
    ui.start(total=10)
    ui.update(10, {"reward/mean": 1.0}, accuracy=0.5)
    ui.stop()
    assert capsys.readouterr().out == ""
