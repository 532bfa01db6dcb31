"""Alert rules on synthetic metric streams, alert state across a resume, and the webhook sink."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlvr.assembly import run_guard
from rlvr.config import AlertsConfig, load_config
from rlvr.ops.alerts import AlertRules
from rlvr.ops.guard import RunDiverged
from rlvr.ops.notify import Webhook
from rlvr.runlog import RunLog, read_jsonl

ROLLBACK = {"nonfinite", "kl", "reward_collapse", "format_errors"}


def healthy(step: int, **over) -> dict:
    m = {
        "reward/mean": 0.6 + 0.05 * (step % 3),
        "reward/format/mean": 0.95,
        "actor/loss": 0.01,
        "actor/grad_norm": 0.5,
        "actor/kl": 0.01,
        "actor/skipped_updates": 0.0,
        "rollout/zero_std_frac": 0.3,
        "reward/invalid_frac": 0.0,
        "perf/rollout_tok_s": 1000.0 + 10 * (step % 4),
    }
    m.update(over)
    return m


def feed(rules: AlertRules, stream: list[dict], start: int = 1) -> list[tuple[int, str]]:
    return [(a.step, a.rule) for i, m in enumerate(stream, start) for a in rules.check(i, m)]


def test_a_healthy_stream_raises_nothing():
    assert feed(AlertRules(AlertsConfig(), ROLLBACK), [healthy(i) for i in range(1, 60)]) == []


def test_nonfinite_and_kl_fire_at_once_as_rollback_rules_and_latch_until_cleared():
    rules = AlertRules(AlertsConfig(kl_max=0.5), ROLLBACK)
    stream = [
        healthy(1),
        healthy(2, **{"actor/loss": float("nan")}),
        healthy(3),
        healthy(4, **{"actor/kl": 0.9}),
        healthy(5, **{"actor/kl": 2.0}),
        healthy(6),
        healthy(7, **{"actor/kl": 0.8}),
    ]
    assert feed(rules, stream) == [(2, "nonfinite"), (4, "kl"), (7, "kl")]  # step 5 still the same episode
    alert = AlertRules(AlertsConfig(), ROLLBACK).check(1, healthy(1, **{"actor/skipped_updates": 2.0}))[0]
    assert alert.severity == "critical" and "2 skipped update(s)" in alert.message
    assert (
        AlertRules(AlertsConfig(), set()).check(1, healthy(1, **{"actor/grad_norm": float("inf")}))[0].severity
        == "warning"
    )


def test_reward_agreement_fires_after_patience_names_the_worst_pair_and_can_roll_back():
    def agree(a: float) -> dict:
        return healthy(
            0,
            **{
                "reward/agreement/mean": a,
                "reward/agreement/correct_vs_judge": a,
                "reward/agreement/correct_vs_format": 0.9,
            },
        )

    stream = [agree(0.8)] * 5 + [agree(-0.1)] * 4 + [agree(0.7)] * 2 + [agree(0.0)] * 3
    rules = AlertRules(AlertsConfig(patience=3, reward_agreement_min=0.2), ROLLBACK | {"reward_agreement"})
    alerts = [a for i, m in enumerate(stream, 1) for a in rules.check(i, m)]
    assert [(a.step, a.rule, a.severity) for a in alerts] == [
        (8, "reward_agreement", "critical"),
        (14, "reward_agreement", "critical"),
    ]
    assert "correct vs judge -0.10" in alerts[0].message and "alerts.reward_agreement_min=+0.20" in alerts[0].message
    assert feed(AlertRules(AlertsConfig(), ROLLBACK), stream) == []  # off unless a floor is set
    with pytest.raises(Exception, match="reward_agreement_min"):
        AlertsConfig(reward_agreement_min=1.5)


def test_reward_collapse_needs_patience_and_a_real_average():
    stream = [healthy(i) for i in range(1, 11)] + [healthy(i, **{"reward/mean": 0.1}) for i in range(11, 15)]
    assert feed(AlertRules(AlertsConfig(patience=3), ROLLBACK), stream) == [(13, "reward_collapse")]
    # one bad step is noise
    assert (
        feed(
            AlertRules(AlertsConfig(), ROLLBACK),
            [healthy(i) for i in range(1, 11)] + [healthy(11, **{"reward/mean": 0.05})],
        )
        == []
    )
    # no collapse from nothing: the average was never above the floor
    low = [healthy(i, **{"reward/mean": 0.05}) for i in range(1, 11)] + [
        healthy(i, **{"reward/mean": 0.0}) for i in range(11, 16)
    ]
    assert feed(AlertRules(AlertsConfig(), ROLLBACK), low) == []


def test_reward_collapse_right_after_the_start_is_caught():
    # the shape of a real default run at lr=1e-3: 0.73, then about 0.1 from step 2 on. The window
    # stays frozen while the condition holds, so the collapsed steps do not lower their own baseline.
    rewards = [0.731, 0.115, 0.089, 0.084, 0.087, 0.091, 0.098]
    stream = [healthy(i, **{"reward/mean": r}) for i, r in enumerate(rewards, 1)]
    assert feed(AlertRules(AlertsConfig(patience=3), ROLLBACK), stream) == [(5, "reward_collapse")]


def test_format_error_spike_zero_variance_invalid_and_throughput():
    cfg = AlertsConfig(patience=2, window=6)
    spike = [healthy(i) for i in range(1, 9)] + [healthy(i, **{"reward/format/mean": 0.4}) for i in (9, 10)]
    assert feed(AlertRules(cfg, ROLLBACK), spike) == [(10, "format_errors")]
    flat = [healthy(i, **{"rollout/zero_std_frac": 1.0}) for i in range(1, 8)]
    assert feed(AlertRules(cfg, ROLLBACK), flat) == [(6, "zero_std")]  # window=6 steps in a row
    bad = [healthy(1), healthy(2, **{"reward/invalid_frac": 0.2}), healthy(3, **{"code/timeout_rate": 0.5})]
    alerts = [a for i, m in enumerate(bad, 1) for a in AlertRules(cfg, ROLLBACK).check(i, m)]
    assert [(a.rule, a.severity) for a in alerts] == [("invalid", "warning"), ("invalid", "warning")]
    assert "timeout_rate" in alerts[1].message
    slow = [healthy(i) for i in range(1, 9)] + [healthy(i, **{"perf/rollout_tok_s": 300.0}) for i in (9, 10, 11)]
    assert feed(AlertRules(cfg, ROLLBACK), slow) == [(10, "throughput")]


def test_eval_decline_only_after_a_rise():
    rules = AlertRules(AlertsConfig(eval_drops=3), ROLLBACK)
    evals = [0.10, 0.30, 0.28, 0.25, 0.20, 0.15]
    got = [(s, a.rule) for s, acc in enumerate(evals, 1) for a in rules.check(s, {"eval/accuracy": acc})]
    assert got == [(5, "eval_decline")]  # the third fall in a row after the rise to 0.30
    falling = AlertRules(AlertsConfig(eval_drops=3), ROLLBACK)
    assert [
        a for s, acc in enumerate([0.5, 0.4, 0.3, 0.2, 0.1], 1) for a in falling.check(s, {"eval/accuracy": acc})
    ] == []


def test_alert_state_resumes_exactly():
    stream = [healthy(i) for i in range(1, 11)] + [healthy(i, **{"reward/mean": 0.1}) for i in range(11, 15)]
    whole = feed(AlertRules(AlertsConfig(), ROLLBACK), stream)
    first = AlertRules(AlertsConfig(), ROLLBACK)
    part = feed(first, stream[:11])
    second = AlertRules(AlertsConfig(), ROLLBACK)
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))  # as a checkpoint would carry it
    assert part + feed(second, stream[11:], start=12) == whole == [(13, "reward_collapse")]


class _Hook(BaseHTTPRequestHandler):
    received: list = []
    status = 200
    delay = 0.0

    def do_POST(self):  # noqa: N802
        time.sleep(type(self).delay)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook_server():
    handler = type("Hook", (_Hook,), {"received": [], "status": 200, "delay": 0.0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}/alerts"
    server.shutdown()
    server.server_close()


def test_alerts_reach_console_events_and_webhook(hook_server, tmp_path, capsys):
    handler, url = hook_server
    cfg = load_config(None, [f"run.dir={tmp_path}", f"alerts.webhook_url={url}", "run.name=nightly"])
    log = RunLog(tmp_path, cfg.to_dict())
    from rlvr.console import RunConsole

    guard = run_guard(cfg, log, RunConsole(enabled=False))
    trigger = guard.check(7, healthy(7, **{"actor/loss": float("nan")}), ["step 7: source 'x' has outcome reward 0"])
    guard.close()
    log.close()
    assert trigger is not None and trigger.rule == "nonfinite"
    assert [e["rule"] for e in read_jsonl(tmp_path / "events.jsonl")] == ["nonfinite", "stuck_source"]
    out = capsys.readouterr().out
    assert "[nonfinite] step 7: non-finite loss" in out and "[stuck_source]" in out
    assert [(ctype, body["rule"], body["run"]) for ctype, body in handler.received] == [
        ("application/json", "nonfinite", "nightly"),
        ("application/json", "stuck_source", "nightly"),
    ]


def test_webhook_failure_is_not_retried_and_backs_off(hook_server):
    handler, url = hook_server
    handler.status = 500
    hook = Webhook(url, timeout_s=2.0, backoff_s=30.0)
    for i in range(5):
        hook.post({"n": i})
    hook.close()
    assert len(handler.received) == 1  # one attempt, then the back-off window swallows the rest
    assert (hook.sent, hook.failed, hook.dropped, hook.last_error) == (0, 1, 4, "HTTP 500")


def test_webhook_timeout_is_bounded(hook_server):
    handler, url = hook_server
    handler.delay = 2.0
    t0 = time.perf_counter()
    ok, status = Webhook(url, timeout_s=0.3).post_now({"n": 1})
    assert not ok and "timed out" in status.lower() and time.perf_counter() - t0 < 1.5


def test_rollback_budget_is_bounded(tmp_path):
    cfg = load_config(None, [f"run.dir={tmp_path}", "rollback.max_retries=1"])
    from rlvr.console import RunConsole

    guard = run_guard(cfg, RunLog(tmp_path, {}), RunConsole(enabled=False))
    trigger = guard.check(3, healthy(3, **{"actor/loss": float("nan")}))
    with pytest.raises(RunDiverged, match="no checkpoint to roll back to"):
        guard.roll_back(3, trigger, restore=lambda target: 0, weights=dict)
    guard.rollbacks = 1
    with pytest.raises(RunDiverged, match="max_retries=1"):
        guard.roll_back(3, trigger, restore=lambda target: 0, weights=dict)
