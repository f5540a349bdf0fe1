"""A real uvicorn server in a thread, over fake models: what an in-process transport cannot
show (a client that hangs up while it waits)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import uvicorn

from specem_local.server import EnsembleServer
from specem_local.server.running import uvicorn_config


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serving(server: EnsembleServer) -> Iterator[str]:
    """``server`` on a free loopback port; yields its base URL, stops it after."""
    port = free_port()
    config = uvicorn_config(server, "127.0.0.1", port, "warning", lifespan="off")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not running.started:
        if time.monotonic() > deadline:
            raise AssertionError("the test server did not start")
        time.sleep(0.05)
    try:
        yield base
    finally:
        running.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "the test server did not stop"


def health(base: str) -> dict:
    return httpx.get(f"{base}/health", timeout=10).json()
