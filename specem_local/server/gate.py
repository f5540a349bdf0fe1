"""What every request passes before a route, as one ASGI middleware: the browser checks that
keep web pages from using the models (``Host``, ``Origin``, CORS, ``Content-Type``), the API
key when one is set, and a barrier that turns any fault into one log line and a 500 in the
API's own error shape.

Why each check (Ollama made the same choices after the same reports):

- **Host**: a page on ``evil.example`` whose name is re-pointed at 127.0.0.1 (DNS rebinding)
  sends ``Host: evil.example`` and may read the answers as its own origin. Only names that
  cannot be rebound are taken: IP addresses of this machine's loopback, the bound host,
  ``localhost`` (and ``*.localhost``, which browsers resolve to loopback themselves), and names
  the user allows.
- **Origin**: a page may send a POST to any address without asking (``text/plain``, a form);
  the browser then says where it came from. Only loopback pages, desktop-app and editor
  webviews, and origins the user allows may use the models; the rest are 403 before anything
  runs, and allowed origins get proper CORS answers, preflight included.
- **Content-Type**: a POST that is not ``application/json`` is refused (415), so no form or
  text body a page can send unasked ever reaches a route.
- **The key** (``--api-key``): ``Authorization: Bearer KEY``, as OpenAI's and Ollama's clients
  send it, or ``x-api-key: KEY``, as Anthropic's do; on every route.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import itertools
import json
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from specem_local.server.errors import HttpError, http_error

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# Origins of pages that run on this machine: loopback sites on any port, desktop apps and
# editor webviews (Ollama allows the same by default).
DEFAULT_ORIGINS = (
    "http://localhost",
    "https://localhost",
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1",
    "https://127.0.0.1",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://[::1]",
    "https://[::1]",
    "http://[::1]:*",
    "https://[::1]:*",
    "app://*",
    "file://*",
    "tauri://*",
    "vscode-webview://*",
    "vscode-file://*",
)
ALLOWED_METHODS = "GET, HEAD, POST, DELETE, OPTIONS"
WILDCARD_BINDS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class GateRules:
    """Who may use the server: the address it is bound to, extra Host names, extra origins,
    and the key every request must carry (None: no key)."""

    bound_host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()  # "*" lets any Host in
    allowed_origins: tuple[str, ...] = ()  # patterns with "*", or "*" for any
    api_key: str | None = None

    def key_given(self, authorization: str, x_api_key: str = "") -> bool:
        """Whether a request carries the key (always, when there is none): as ``Authorization:
        Bearer KEY`` (OpenAI's and Ollama's clients) or ``x-api-key: KEY`` (Anthropic's)."""
        if self.api_key is None:
            return True
        wanted = self.api_key.encode()
        scheme, _, token = authorization.partition(" ")
        bearer = scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), wanted)
        return bearer or (bool(x_api_key.strip()) and hmac.compare_digest(x_api_key.strip().encode(), wanted))

    def host_allowed(self, header: str) -> bool:
        """Whether a ``Host`` header names this server in a way no DNS rebinding can."""
        host = host_name(header)
        if host is None:
            return False
        if "*" in self.allowed_hosts or host in (h.lower() for h in self.allowed_hosts):
            return True
        if is_loopback(host) or host == self.bound_host.lower():
            return True
        # An address literal is what the client dialled, never a name a page could re-point;
        # bound to every interface, any of the machine's addresses may be dialled.
        return self.bound_host in WILDCARD_BINDS and _is_address(host)

    def origin_allowed(self, origin: str, host_header: str) -> bool:
        """Whether a page from ``origin`` may use the server: a local page, an allowed one, or
        the server's own origin."""
        origin = _without_slash(origin.strip().lower())
        if origin == "null" or not origin:  # sandboxed frames and local files with no origin of their own
            return "*" in self.allowed_origins
        parts = urlsplit(origin)
        if parts.scheme in ("http", "https") and parts.netloc == host_header.strip().lower():
            return True  # a page served from this very address (same origin)
        patterns = (*DEFAULT_ORIGINS, *(_without_slash(pattern.lower()) for pattern in self.allowed_origins))
        return any(_glob(pattern).fullmatch(origin) for pattern in patterns)


def is_loopback(host: str) -> bool:
    """``localhost``, a ``*.localhost`` name (browsers resolve those to loopback themselves),
    or a loopback address."""
    host = host.lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    return _is_address(host) and ipaddress.ip_address(host).is_loopback


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header, lower case, without port or brackets; None if malformed."""
    header = header.strip().lower()
    if not header:
        return None
    if header.startswith("["):  # [::1]:8080
        host, closed, rest = header[1:].partition("]")
        if not closed or (rest and not (rest.startswith(":") and _is_port(rest[1:]))):
            return None
        return host
    name, colon, port = header.partition(":")
    if colon and not _is_port(port):
        return None
    return name or None


def _without_slash(origin: str) -> str:
    """An origin without the trailing slash some clients add; ``file://`` keeps its own."""
    return origin[:-1] if origin.endswith("/") and not origin.endswith("://") else origin


@functools.cache
def _glob(pattern: str) -> re.Pattern[str]:
    """An origin pattern whose only wildcard is ``*``: a port's digits after a colon, a whole
    host right after ``scheme://``, else one label of a name; never any characters
    (``http://localhost:*`` is not ``http://localhost:3000.evil.com``). ``[::1]`` is an
    address, not a set."""
    parts = pattern.split("*")
    out = re.escape(parts[0])
    for before, part in itertools.pairwise(parts):
        if before.endswith("://"):
            wildcard = r"[^/:@?#]*" if not part else r"[^./:@?#]*"  # "app://*": a host; "http://*.x": a label
        elif before.endswith(":"):
            wildcard = r"[0-9]{1,5}"
        else:
            wildcard = r"[^./:@?#]*"
        out += wildcard + re.escape(part)
    return re.compile(out)


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) < 65536


def split_origins(values: Iterable[str]) -> tuple[str, ...]:
    """Origins from flags and ``SPECEM_ORIGINS`` (comma-separated), without blanks."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


class Gate:
    """The middleware: checks, CORS, and the fault barrier, around the whole app."""

    def __init__(self, app: App, rules: GateRules) -> None:
        self.app = app
        self.rules = rules

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        path, method = scope.get("path", "/"), scope.get("method", "GET")
        host = headers.get("host", "")
        if not self.rules.host_allowed(host):
            await _respond(
                send, path, 403, f"the Host header {host[:80]!r} is not this server's; add it with --allowed-host"
            )
            return
        origin = headers.get("origin")
        if origin is not None and not self.rules.origin_allowed(origin, host):
            await _respond(
                send,
                path,
                403,
                f"requests from the web page at {origin[:80]!r} are not allowed; allow its origin with "
                "--allow-origin (or SPECEM_ORIGINS)",
            )
            return
        cors = _cors_headers(origin) if origin is not None else []
        if method == "OPTIONS":  # a preflight (or a client asking what is allowed): answered here
            asked = headers.get("access-control-request-headers", "")
            if asked:  # whatever headers the page asks to send: the origin is allowed already
                cors = [(k, v) for k, v in cors if k != b"access-control-allow-headers"]
                cors.append((b"access-control-allow-headers", asked.encode("latin-1")))
            await _send_headers(send, 204, [*cors, (b"allow", ALLOWED_METHODS.encode())])
            await send({"type": "http.response.body", "body": b""})
            return
        if not self.rules.key_given(headers.get("authorization", ""), headers.get("x-api-key", "")):
            message = "a valid API key is needed: send Authorization: Bearer KEY (or x-api-key: KEY)"
            await _respond(send, path, 401, message, code="invalid_api_key", extra=cors)
            return
        if method == "POST" and not _is_json(headers.get("content-type", "")):
            await _respond(
                send,
                path,
                415,
                "send the body as JSON with Content-Type: application/json",
                extra=cors,
            )
            return
        await self._guarded(scope, receive, send, cors)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send, cors: list[tuple[bytes, bytes]]) -> None:
        """The app, with CORS headers added and any fault turned into a 500 and one log line."""
        started = False

        async def sending(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if cors:
                    message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as error:  # a fault no route caught: one log line, and a 500 if nothing was sent
            said = http_error(error)  # logs it
            if not started:
                await _respond(send, scope.get("path", "/"), said.status, said.message, kind=said.kind)


def _is_json(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
        (b"access-control-allow-headers", b"Authorization, Content-Type"),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
    ]


async def _send_headers(send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _respond(
    send: Send,
    path: str,
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    code: str | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps(HttpError(status, message, kind, code=code).body(path)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await _send_headers(send, status, headers)
    await send({"type": "http.response.body", "body": body})
