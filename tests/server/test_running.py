"""``specem serve``'s process around the app, over fake models: uvicorn's settings, and SIGTERM
and SIGHUP ending the server cleanly (the ensemble told, exit status 0), in a child process as
a user's ``kill`` or systemd would stop it."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from specem_local.server import EnsembleServer, ServerOptions
from specem_local.server.running import uvicorn_config
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.live import free_port

CHILD = textwrap.dedent(
    """
    import sys
    from specem_local.server import EnsembleServer, ServerOptions
    from specem_local.server.running import run_until_stopped
    from tests.engine.conftest import fake_ensemble, fake_member

    ensemble = fake_ensemble(fake_member("a", "Paris"), fake_member("b", "Paris"))
    server = EnsembleServer(ensemble, ServerOptions(record=False))
    stops = []
    told = server.shut_down
    server.shut_down = lambda: (stops.append(1), told())
    try:
        run_until_stopped(server, "127.0.0.1", int(sys.argv[1]), "warning")
    finally:
        print("told", len(stops), flush=True)
    """
)


def test_uvicorn_is_given_a_plain_asgi_3_function_and_the_settings():
    ensemble = fake_ensemble(fake_member("a", "Paris"))
    server = EnsembleServer(ensemble, ServerOptions(record=False))
    config = uvicorn_config(server, "127.0.0.2", 8123, "error", timeout_graceful_shutdown=3)
    assert (config.host, config.port, config.log_level, config.interface) == ("127.0.0.2", 8123, "error", "asgi3")
    assert config.timeout_graceful_shutdown == 3
    with pytest.raises(TypeError):
        config.app()  # uvicorn's factory probe: refused, so the app is used as it is
    sent: list = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/health", "headers": [(b"host", b"127.0.0.1")]}
    asyncio.run(config.app(scope, receive, send))  # what it is handed reaches the server's app
    assert sent[0]["status"] == 200
    ensemble.close()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_ends_the_server_cleanly_and_tells_the_ensemble(stop):
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and child.poll() is None, child.stderr.read() if child.stderr else ""
            time.sleep(0.1)
        child.send_signal(stop)
        out, err = child.communicate(timeout=15)
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert "told 1" in out
    assert "Uvicorn running" not in err  # the log level asked for (warning), not uvicorn's info
