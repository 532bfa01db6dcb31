"""`rlvr check`: every line measured; exit 0 when all pass, 1 when one fails."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from ops_tiny import OPS_TINY, sft_cache

from rlvr.cli import main

LINES = ["sampling", "reference", "rewards", "train step", "checkpoint", "memory", "alerts"]


class _Hook(BaseHTTPRequestHandler):
    posts: list = []

    def do_POST(self):  # noqa: N802
        type(self).posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def _check(args, tmp_path):
    threads = torch.get_num_threads()
    try:
        code = main(["check", *args, "--json", str(tmp_path / "check.json")])
    finally:
        torch.set_num_threads(threads)
    return code, {line["name"]: line for line in json.loads((tmp_path / "check.json").read_text())}


def test_go_live_check_passes_on_a_working_setup_and_reaches_the_webhook(tmp_path, tmp_path_factory, capsys):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        code, lines = _check(
            [*OPS_TINY, f"sft.cache_dir={sft_cache(tmp_path_factory)}", f"alerts.webhook_url={url}"], tmp_path
        )
    finally:
        server.shutdown()
        server.server_close()
    assert list(lines) == LINES
    assert code == 0, lines
    assert "0 empty, 0 cut" in lines["sampling"]["figure"] and "tok/s" in lines["sampling"]["figure"]
    assert "identical" in lines["checkpoint"]["figure"] and "DIFFER" not in lines["checkpoint"]["figure"]
    assert "webhook HTTP 204" in lines["alerts"]["figure"]
    assert [p["rule"] for p in _Hook.posts] == ["check"]
    out = capsys.readouterr().out
    assert "7/7 checks pass" in out


def test_go_live_check_exits_nonzero_when_a_line_fails(tmp_path, tmp_path_factory, capsys):
    # a webhook nobody listens on: the alert line fails, the others still run and report
    closed = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    port = closed.server_address[1]
    closed.server_close()
    code, lines = _check(
        [
            *OPS_TINY,
            f"sft.cache_dir={sft_cache(tmp_path_factory)}",
            f"alerts.webhook_url=http://127.0.0.1:{port}/hook",
            "alerts.webhook_timeout_s=1",
        ],
        tmp_path,
    )
    assert code == 1
    assert not lines["alerts"]["ok"] and "webhook" in lines["alerts"]["detail"]
    assert all(lines[name]["ok"] for name in LINES if name != "alerts")
    assert "failing: alerts" in capsys.readouterr().out
