"""A bucket on moto's S3 server for the tests of run directories at a URL (tests/test_storage.py,
tests/test_ray_nodes.py): its own process on a free port of 127.0.0.1 (in the test process its
Flask globals would break vLLM's kernel registration in later tests)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator


@contextlib.contextmanager
def s3_server(bucket: str = "runs") -> Iterator[dict[str, str]]:
    """The server with `bucket` made; yields the environment that reaches it, set in os.environ
    meanwhile (and restored after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import fsspec

    fsspec.get_filesystem_class("s3").clear_instance_cache()  # fsspec keeps filesystems, endpoint and all
    try:
        fs = fsspec.filesystem("s3", skip_instance_cache=True)
        deadline = time.time() + 60
        while True:
            try:
                fs.mkdir(bucket)
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        yield env
    finally:
        fsspec.get_filesystem_class("s3").clear_instance_cache()  # none may reach a server that is gone
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        server.kill()
        server.wait()
