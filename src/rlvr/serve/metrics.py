"""Prometheus metrics of `rlvr serve` (GET /metrics), one registry per server.

rlvr_serve_requests_total{route,model,status}        every HTTP request, errors included
rlvr_serve_errors_total{route,model,status}          the 4xx and 5xx among them
rlvr_serve_request_seconds{route,model}              latency to the last byte (a stream's whole length)
rlvr_serve_time_to_first_token_seconds{model}
rlvr_serve_prompt_tokens_total{model}, rlvr_serve_completion_tokens_total{model}
rlvr_serve_in_flight, rlvr_serve_queued             generations running, and waiting for a slot
rlvr_serve_ab_requests_total{arm}, rlvr_serve_ab_verified_total{arm,correct}
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

ROUTES = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/messages",
        "/v1/responses",
        "/v1/models",
        "/healthz",
        "/metrics",
        "/ab",
    }
)
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class ServeMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("rlvr_serve_requests", "HTTP requests", ["route", "model", "status"], registry=r)
        self.errors = Counter(
            "rlvr_serve_errors", "HTTP requests answered 4xx or 5xx", ["route", "model", "status"], registry=r
        )
        self.latency = Histogram(
            "rlvr_serve_request_seconds",
            "Request latency to the last byte",
            ["route", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.first_token = Histogram(
            "rlvr_serve_time_to_first_token_seconds",
            "Admission to the first token",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter("rlvr_serve_prompt_tokens", "Prompt tokens", ["model"], registry=r)
        self.completion_tokens = Counter("rlvr_serve_completion_tokens", "Generated tokens", ["model"], registry=r)
        self.in_flight = Gauge("rlvr_serve_in_flight", "Generations running", registry=r)
        self.queued = Gauge("rlvr_serve_queued", "Requests waiting for a generation slot", registry=r)
        self.ab_requests = Counter("rlvr_serve_ab_requests", "Requests per A/B arm", ["arm"], registry=r)
        self.ab_verified = Counter(
            "rlvr_serve_ab_verified", "Verified responses per A/B arm", ["arm", "correct"], registry=r
        )

    def observe(self, route: str, model: str, status: int, seconds: float) -> None:
        labels = dict(route=route, model=model, status=str(status))
        self.requests.labels(**labels).inc()
        if status >= 400:
            self.errors.labels(**labels).inc()
        self.latency.labels(route=route, model=model).observe(seconds)


class MetricsMiddleware:
    """ASGI middleware timing each request to its last body byte (so a stream counts whole); the
    handler names the model it served in `request.state.model`."""

    def __init__(self, app, metrics: ServeMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500
        state = scope.setdefault("state", {})

        async def send_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope["path"] if scope["path"] in ROUTES else "other"
            self.metrics.observe(route, state.get("model", "-"), status, time.perf_counter() - start)
