"""The one mapping from an exception to what a client is answered: an HTTP status and a body in
the route's API shape (OpenAI's ``{"error": {"message", "type", "param", "code"}}``, Ollama's
``{"error": "..."}`` under ``/api/``, Anthropic's ``{"type": "error", "error": {"type", "message"}}``
under ``/v1/messages``), for every route, the gate's barrier and the stream writers alike.

A request's fault found while parsing is an ``ApiError``; the engine's are ``SpecemError``s (a
``SettingError`` names the setting, said as the request's own field through the request's
``fields``); anything else is a bug: a 500 and one log line.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from specem_local.errors import SpecemError


class _Stderr(logging.StreamHandler):
    """Whatever ``sys.stderr`` is when a line is written (a test's capture, a redirected log)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _server_log() -> logging.Logger:
    """The server's log: one line per message on stderr (``specem serve: error: ...``), as the
    other lines of ``specem serve`` are; its modules log through it."""
    server = logging.getLogger("specem_local.server")
    if not server.handlers:
        server.addHandler(_Stderr())
        server.setLevel(logging.INFO)
        server.propagate = False
    return server


_server_log()
log = logging.getLogger(__name__)
REQUEST_ERROR, SERVER_ERROR = "invalid_request_error", "server_error"


class ApiError(Exception):
    """A request's fault found while parsing it: HTTP status, message, and the offending field."""

    def __init__(
        self, status: int, message: str, param: str | None = None, kind: str = REQUEST_ERROR, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code


@dataclass(frozen=True)
class HttpError:
    """What a client is told: a status, a message, OpenAI's error type, field and code."""

    status: int
    message: str
    kind: str = REQUEST_ERROR
    param: str | None = None
    code: str | None = None

    def body(self, path: str) -> dict[str, Any]:
        """The error in the shape the route's clients read."""
        if path.startswith("/api/"):
            return {"error": self.message}
        if path == "/v1/messages" or path.startswith("/v1/messages/"):
            return anthropic_error_body(self.status, self.message, self.param)
        if path == "/v1/responses":  # a Responses function tool has its fields at the top: tools[0].parameters
            return error_body(OPENAI_TOOL_FIELD.sub(r"tools[\1].\2", self.message), self.kind, self.param, self.code)
        return error_body(self.message, self.kind, self.param, self.code)

    def response(self, path: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(self.body(path), status_code=self.status, headers=headers)


def error_body(
    message: str, kind: str = REQUEST_ERROR, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """An error as OpenAI's API writes it."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# Anthropic's error types by status (its errors carry no field: the message names it).
ANTHROPIC_ERRORS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


# A tool's fields as the engine names them (OpenAI's shape) and as Anthropic's request wrote them:
# tools[0].function.parameters... -> tools[0].input_schema..., tools[0].function.name -> tools[0].name
OPENAI_TOOL_FIELD = re.compile(r"tools\[(\d+)\]\.function\.(parameters)?")


def anthropic_error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """An error as Anthropic's API writes it: a 4xx not named above is an
    ``invalid_request_error``, a 5xx an ``api_error``; the field at fault is said first when
    the message does not name it."""
    kind = ANTHROPIC_ERRORS.get(status, "api_error" if status >= 500 else REQUEST_ERROR)
    message = OPENAI_TOOL_FIELD.sub(lambda m: f"tools[{m[1]}]." + ("input_schema" if m[2] else ""), message)
    said = message if param is None or param in message else f"{param}: {message}"
    return {"type": "error", "error": {"type": kind, "message": said}}


def http_error(error: BaseException, fields: Mapping[str, str] | None = None, *, answering: bool = False) -> HttpError:
    """The answer to ``error``. ``fields``: the engine's setting names as this request sent
    them (``max_tokens`` -> ``options.num_predict``, ``schema`` -> ``response_format.json_schema.
    schema``); ``answering``: the answer had begun (a failure then says so). A server fault
    (5xx) is logged, once, here."""
    if isinstance(error, ApiError):
        return HttpError(error.status, error.message, error.kind, error.param, error.code)
    if isinstance(error, SpecemError):
        message, param = str(error), error.field
        sent = (fields or {}).get(param or "")
        if param and sent:
            message, param = _renamed(message, param, sent), sent
        if error.status >= 500:
            message = _logged(f"the answer failed: {message}" if answering else message)
        kind = SERVER_ERROR if error.status >= 500 else REQUEST_ERROR
        return HttpError(error.status, message, kind, param, error.code)
    detail = f"{type(error).__name__}: {error}"
    said = f"the answer failed: {detail}" if answering else f"the server failed: {detail}"
    return HttpError(500, _logged(said), SERVER_ERROR)


def _renamed(message: str, field: str, sent: str) -> str:
    """``message`` naming the field as the request sent it."""
    if message.startswith(field):
        return sent + message[len(field) :]
    return message.replace(field, sent, 1)


def _logged(message: str) -> str:
    message = message[:400]
    log.error("specem serve: error: %s", message)
    return message
