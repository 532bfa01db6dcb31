"""Where alerts go: the console, events.jsonl, and an optional webhook.

The webhook gets one JSON POST per alert from a background thread, so a
slow endpoint never stalls training. No retries: a failed POST (error,
non-2xx, timeout) opens a back-off window in which alerts are counted but
not sent; the next POST after it says how many were dropped. The queue is
bounded for the same reason: an alert storm cannot become a request storm.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from rich.markup import escape

from rlvr.ops.alerts import Alert


class Webhook:
    def __init__(self, url: str, *, timeout_s: float = 5.0, backoff_s: float = 60.0, max_queue: int = 100):
        self.url, self.timeout_s, self.backoff_s = url, timeout_s, backoff_s
        self.sent = self.failed = self.dropped = 0
        self.last_error: str | None = None
        self._pause_until = 0.0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=max_queue)
        self._thread = threading.Thread(target=self._run, name="alert-webhook", daemon=True)
        self._thread.start()

    def post(self, payload: dict[str, Any]) -> None:
        """Queue one alert; never blocks the caller."""
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            self.dropped += 1

    def post_now(self, payload: dict[str, Any]) -> tuple[bool, str]:
        """Send one payload on the calling thread: (delivered, status or error). One attempt."""
        body = json.dumps(payload, default=str).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "rlvr-alerts"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return 200 <= response.status < 300, f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            return False, f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            return False, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"

    def _run(self) -> None:
        while (payload := self._queue.get()) is not None:
            if time.monotonic() < self._pause_until:
                self.dropped += 1
            else:
                if self.dropped:
                    payload = {**payload, "dropped_before": self.dropped}
                ok, status = self.post_now(payload)
                if ok:
                    self.sent, self.dropped = self.sent + 1, 0
                else:
                    self.failed += 1
                    self.last_error = status
                    self._pause_until = time.monotonic() + self.backoff_s
            self._queue.task_done()

    def close(self, wait_s: float | None = None) -> None:
        """Deliver what is queued (bounded by about one timeout per queued alert), then stop."""
        try:
            self._queue.put(None, timeout=wait_s or self.timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout=(wait_s or self.timeout_s) * (self._queue.qsize() + 2))


class Notifier:
    """Sends each alert to every sink: console, events.jsonl (through the run log), webhook."""

    def __init__(self, log, ui, webhook: Webhook | None = None, run_name: str = ""):
        self.log, self.ui, self.webhook, self.run_name = log, ui, webhook, run_name

    def send(self, alert: Alert) -> dict[str, Any]:
        record = self.log.event("alert", **alert.record())
        self.ui.warn(escape(f"[{alert.rule}] {alert.message}"))
        if self.webhook is not None:
            self.webhook.post({"source": "rlvr", "run": self.run_name, **record})
        return record

    def close(self) -> None:
        if self.webhook is not None:
            self.webhook.close()
            if self.webhook.failed or self.webhook.dropped:
                self.log.event(
                    "webhook",
                    sent=self.webhook.sent,
                    failed=self.webhook.failed,
                    dropped=self.webhook.dropped,
                    last_error=self.webhook.last_error,
                )
