"""``specem serve``'s life: uvicorn serving the app until a signal stops it, cleanly.

uvicorn stops gracefully on SIGINT and SIGTERM (what ``kill``, systemd and ``docker stop``
send), then raises the signal again once it has stopped. Here the answer in flight is cancelled
as the signal arrives (its stream ends with what it wrote, requests still waiting get a 503),
open connections get ``SHUTDOWN`` seconds to end, and SIGTERM then leaves by ``SystemExit(0)``
so that the caller's ``with`` block closes the members first (Ctrl-C leaves with
``KeyboardInterrupt``, as everywhere). SIGHUP (the terminal closed) stops it as SIGTERM does.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send

from specem_local.server.app import EnsembleServer

SHUTDOWN = 10  # seconds open connections get to end after the signal


class StoppingServer(uvicorn.Server):
    """uvicorn's server, telling ours when a signal stops it."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_stop = on_stop

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.on_stop()
        super().handle_exit(sig, frame)


def uvicorn_config(server: EnsembleServer, host: str, port: int, log_level: str, **more: Any) -> uvicorn.Config:
    """uvicorn's settings for the server. uvicorn guesses what an app is by calling it with no
    arguments (a factory answers) and by how its ``__call__`` looks (ASGI 2 or 3): it is given a
    plain ASGI 3 function, which refuses the call, and told the interface."""
    app = server.app

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        await app(scope, receive, send)

    return uvicorn.Config(asgi, host=host, port=port, log_level=log_level, interface="asgi3", **more)


def run_until_stopped(server: EnsembleServer, host: str, port: int, log_level: str) -> None:
    """Serve until SIGINT (``KeyboardInterrupt`` afterwards), SIGTERM or SIGHUP
    (``SystemExit(0)`` afterwards)."""
    config = uvicorn_config(server, host, port, log_level, timeout_graceful_shutdown=SHUTDOWN)
    stopping = StoppingServer(config, server.shut_down)
    signal.signal(signal.SIGTERM, _exit_cleanly)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda *_: stopping.handle_exit(signal.SIGTERM, None))
    stopping.run()


def _exit_cleanly(_signal: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)
