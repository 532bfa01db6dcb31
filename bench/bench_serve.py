"""Load test of `rlvr serve` on localhost: N concurrent streaming clients for a fixed time.

    .venv/bin/python bench/bench_serve.py                   # tiny model, 32 clients, 60 s, hf engine
    .venv/bin/python bench/bench_serve.py --model runs/default --clients 32 --seconds 60

Starts `rlvr serve MODEL --port 0` (127.0.0.1 only) in its own process, warms it up, reads its
resident memory, then runs the clients (httpx, streaming /v1/chat/completions with usage) until the
time is up and each has finished its request; reads the memory again and stops the server. Prints
and writes (--out) p50/p99 latency and time to first token, requests/s, completion tokens/s, errors
(non-200 answers, error events, streams without [DONE]) and the resident memory before and after.
The clients stop by themselves; nothing but the server on 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def start_server(model: str, extra: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlvr.cli",
            "serve",
            model,
            "--port",
            "0",
            "serve.chat_template=plain",
            "serve.model_name=bench",
            *extra,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    while True:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise SystemExit("rlvr serve did not start:\n" + "".join(lines))
        lines.append(line)
        if m := re.search(r"(http://127\.0\.0\.1:\d+)/v1", line):
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, m.group(1)


async def one_request(client, url: str, prompt: str, max_tokens: int) -> dict:
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first, tokens, done, error = None, 0, False, None
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            return {"error": f"HTTP {r.status_code}", "latency": time.perf_counter() - start}
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            event = json.loads(data)
            if "error" in event:
                error = event["error"]["message"]
            elif event["choices"] and event["choices"][0]["delta"].get("content") and first is None:
                first = time.perf_counter() - start
            elif event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    return {
        "latency": time.perf_counter() - start,
        "ttft": first,
        "tokens": tokens,
        "error": error or (None if done else "stream ended without [DONE]"),
    }


async def load(url: str, clients: int, seconds: float, max_tokens: int) -> tuple[list[dict], float]:
    import httpx

    results: list[dict] = []
    stop_at = time.perf_counter() + seconds

    async def client_loop(i: int) -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            k = 0
            while time.perf_counter() < stop_at:
                try:
                    results.append(await one_request(client, url, f"{(i + k) % 90 + 10}+{k % 9 + 1}=", max_tokens))
                except Exception as exc:  # a dropped connection counts as an error, the client goes on
                    results.append({"error": f"{type(exc).__name__}: {exc}", "latency": 0.0})
                k += 1

    start = time.perf_counter()
    await asyncio.gather(*(client_loop(i) for i in range(clients)))
    return results, time.perf_counter() - start


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model or run directory (default: a fresh tiny model)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", default="bench/serve_results.json")
    parser.add_argument("overrides", nargs="*", help="serve.* overrides, e.g. serve.max_concurrency=8")
    args = parser.parse_args()
    model = args.model
    if model is None:
        from rlvr.models.tiny import save_tiny

        model = str(save_tiny(Path(tempfile.mkdtemp()) / "tiny", 128, 4, 4))
    proc, url = start_server(model, args.overrides)
    try:
        asyncio.run(load(url, 4, 3, args.max_tokens))  # warm-up
        before = rss_mb(proc.pid)
        results, wall = asyncio.run(load(url, args.clients, args.seconds, args.max_tokens))
        after = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    ok = [r for r in results if not r["error"]]
    errors = [r["error"] for r in results if r["error"]]
    report = {
        "model": model,
        "clients": args.clients,
        "seconds": args.seconds,
        "wall_s": round(wall, 1),
        "max_tokens": args.max_tokens,
        "overrides": args.overrides,
        "requests": len(results),
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:5],
        "requests_per_s": round(len(ok) / wall, 2),
        "completion_tokens_per_s": round(sum(r["tokens"] for r in ok) / wall, 1),
        "latency_p50_s": round(pct([r["latency"] for r in ok], 0.50), 3),
        "latency_p99_s": round(pct([r["latency"] for r in ok], 0.99), 3),
        "ttft_p50_s": round(pct([r["ttft"] for r in ok if r["ttft"] is not None], 0.50), 3),
        "ttft_p99_s": round(pct([r["ttft"] for r in ok if r["ttft"] is not None], 0.99), 3),
        "mean_completion_tokens": round(statistics.mean(r["tokens"] for r in ok), 1) if ok else 0,
        "rss_mb_before": round(before, 1),
        "rss_mb_after": round(after, 1),
    }
    print(json.dumps(report, indent=1))
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
