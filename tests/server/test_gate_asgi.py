"""The gate as ASGI, message by message (no server, no models): each refusal's status, headers
and body exactly as a client reads them (ASGI header names are lower case), CORS on what the app
sends, the API key, and the fault barrier. The routes' own tests (test_routes.py) cover the gate
in front of the real app."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest

from specem_local.server.gate import ALLOWED_METHODS, Gate, GateRules, host_name

LOCAL = GateRules()
CORS = [
    (b"access-control-allow-origin", b"http://localhost:3000"),
    (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
    (b"access-control-allow-headers", b"Authorization, Content-Type"),
    (b"access-control-max-age", b"600"),
    (b"vary", b"Origin"),
]


class Inner:
    """The app behind the gate: answers 200 with one header, fails before or after starting, or is quiet."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.scopes: list[dict[str, Any]] = []
        self.channels: list[tuple[Any, Any]] = []

    async def __call__(self, scope, receive, send) -> None:
        self.scopes.append(scope)
        self.channels.append((receive, send))
        if self.fail == "quiet":
            return
        if self.fail == "before":
            raise RuntimeError("boom")
        start = {"type": "http.response.start", "status": 200}
        await send(start if self.fail == "bare" else {**start, "headers": [(b"x-app", b"1")]})
        if self.fail == "after":
            raise RuntimeError("boom mid-answer")
        await send({"type": "http.response.body", "body": b"ok"})


def call(
    rules: GateRules = LOCAL,
    method: str = "GET",
    path: str | None = "/v1/models",
    inner: Inner | None = None,
    **headers: str | None,
) -> tuple[list[dict[str, Any]], Inner]:
    """The messages the gate sends for one request (``headers``: name with _ for -)."""
    inner = inner or Inner()
    sent: list[Any] = []
    given = {"host": "127.0.0.1:8080", **headers}
    raw = [(k.replace("_", "-").encode(), v.encode("latin-1")) for k, v in given.items() if v is not None]
    scope: dict[str, Any] = {"type": "http", "method": method, "headers": raw}
    if path is not None:
        scope["path"] = path

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(Gate(inner, rules)(scope, receive, send))
    return sent, inner


def refusal(sent: list[dict[str, Any]]) -> tuple[int, list[tuple[bytes, bytes]], Any]:
    start, body = sent
    assert body["type"] == "http.response.body"
    headers = start["headers"]
    assert headers[:2] == [(b"content-type", b"application/json"), (b"content-length", str(len(body["body"])).encode())]
    return start["status"], headers[2:], json.loads(body["body"])


def openai_error(message: str, kind: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def test_other_scopes_pass_untouched():
    inner = Inner("quiet")
    sent: list[Any] = []
    scope = {"type": "lifespan"}

    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    asyncio.run(Gate(inner, GateRules())(scope, receive, sent.append))  # type: ignore[arg-type]
    assert inner.scopes == [scope] and inner.channels == [(receive, sent.append)]


def test_a_foreign_host_is_403_naming_it():
    sent, inner = call(host="evil.example")
    assert refusal(sent) == (
        403,
        [],
        openai_error("the Host header 'evil.example' is not this server's; add it with --allowed-host"),
    )
    assert inner.scopes == []


def test_a_missing_or_long_host_is_403_quoting_at_most_80_characters():
    said = "the Host header {!r} is not this server's; add it with --allowed-host"
    sent, _ = call(host=None)
    assert refusal(sent)[2] == openai_error(said.format(""))
    long, _ = call(path=None, host="h" * 100)
    assert refusal(long)[2] == openai_error(said.format("h" * 80))
    far, _ = call(origin="https://" + "o" * 100)
    assert f"page at {'https://' + 'o' * 72!r} are" in refusal(far)[2]["error"]["message"]


def test_a_foreign_origin_is_403_in_the_shape_of_the_route():
    sent, _ = call(path="/api/chat", origin="https://evil.example")
    message = (
        "requests from the web page at 'https://evil.example' are not allowed; allow its origin with "
        "--allow-origin (or SPECEM_ORIGINS)"
    )
    assert refusal(sent) == (403, [], {"error": message})


def test_a_preflight_is_answered_by_the_gate_with_what_the_page_asked_for():
    sent, inner = call(
        method="OPTIONS", origin="http://localhost:3000", access_control_request_headers="x-stainless-os"
    )
    start, body = sent
    asked = [(k, v) for k, v in CORS if k != b"access-control-allow-headers"] + [
        (b"access-control-allow-headers", b"x-stainless-os")
    ]
    assert start == {
        "type": "http.response.start",
        "status": 204,
        "headers": [*asked, (b"allow", ALLOWED_METHODS.encode())],
    }
    assert body == {"type": "http.response.body", "body": b""} and inner.scopes == []
    plain, _ = call(method="OPTIONS")
    assert plain[0]["headers"] == [(b"allow", ALLOWED_METHODS.encode())]


@pytest.mark.parametrize(
    ("authorization", "passes"),
    [("Bearer sk-1", True), ("bearer sk-1", True), ("BEARER  sk-1 ", True), ("Bearer sk-2", False),
     ("Basic sk-1", False), ("sk-1", False), ("Bearersk-1", False), ("", False), ("Bearer sk-1 x", False)],
)  # fmt: skip
def test_the_api_key_is_a_bearer_token_and_nothing_else(authorization, passes):
    rules = GateRules(api_key="sk-1")
    assert rules.key_given(authorization) is passes
    assert GateRules().key_given(authorization)  # no key set: anything passes


def test_a_missing_key_is_401_with_cors_so_the_page_can_read_why():
    sent, inner = call(GateRules(api_key="sk-1"), origin="http://localhost:3000")
    expected = openai_error(
        "a valid API key is needed: send Authorization: Bearer KEY (or x-api-key: KEY)", code="invalid_api_key"
    )
    assert refusal(sent) == (401, CORS, expected) and inner.scopes == []
    passed, inner = call(GateRules(api_key="sk-1"), authorization="Bearer sk-1")
    assert passed[0]["status"] == 200 and len(inner.scopes) == 1


@pytest.mark.parametrize(
    ("x_api_key", "authorization", "passes"),
    [("sk-1", "", True), (" sk-1 ", "", True), ("sk-2", "", False), ("", "", False), ("Bearer sk-1", "", False),
     ("sk-1x", "", False), ("sk-1", "Bearer sk-2", True), ("sk-2", "Bearer sk-1", True), ("SK-1", "", False)],
)  # fmt: skip
def test_the_api_key_may_come_as_anthropics_x_api_key(x_api_key, authorization, passes):
    rules = GateRules(api_key="sk-1")
    assert rules.key_given(authorization, x_api_key) is passes
    assert GateRules().key_given("", x_api_key)  # no key set: anything passes
    assert GateRules(api_key="").key_given("", "") is False  # an empty key never matches an absent one


def test_x_api_key_passes_the_gate_and_a_wrong_one_is_401_in_anthropics_shape():
    passed, inner = call(GateRules(api_key="sk-1"), method="POST", path="/v1/messages", x_api_key="sk-1",
                         anthropic_version="2023-06-01", content_type="application/json")  # fmt: skip
    assert passed[0]["status"] == 200 and len(inner.scopes) == 1
    sent, inner = call(GateRules(api_key="sk-1"), method="POST", path="/v1/messages", x_api_key="sk-2")
    message = "a valid API key is needed: send Authorization: Bearer KEY (or x-api-key: KEY)"
    assert refusal(sent) == (
        401,
        [],
        {"type": "error", "error": {"type": "authentication_error", "message": message}},
    )
    assert inner.scopes == []
    elsewhere, _ = call(GateRules(api_key="sk-1"), x_api_key="sk-1")  # every route takes it
    assert elsewhere[0]["status"] == 200


@pytest.mark.parametrize(
    ("content_type", "json_body"),
    [("application/json", True), ("Application/JSON; charset=utf-8", True), ("application/vnd.api+json", True),
     (" application/merge-patch+json ;x=1;y=2", True), ("text/plain", False), ("", False),
     ("application/jsonx", False), ("text/x+json", False), ("application/json+xml", False),
     ("multipart/form-data; a=+json", False), (None, False)],
)  # fmt: skip
def test_a_post_must_be_json(content_type: str | None, json_body):
    sent, inner = call(method="POST", content_type=content_type, origin="http://localhost:3000")
    if json_body:
        assert sent[0]["status"] == 200 and inner.scopes
    else:
        expected = openai_error("send the body as JSON with Content-Type: application/json")
        assert refusal(sent) == (415, CORS, expected) and not inner.scopes


def test_what_the_app_sends_gets_cors_after_its_own_headers():
    sent, _ = call(origin="http://localhost:3000")
    assert sent[0] == {"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1"), *CORS]}
    assert sent[1] == {"type": "http.response.body", "body": b"ok"}
    plain, _ = call()
    assert plain[0]["headers"] == [(b"x-app", b"1")]
    bare, _ = call(origin="http://localhost:3000", inner=Inner("bare"))  # a start without headers
    assert bare[0]["headers"] == CORS


def test_a_fault_before_the_answer_starts_is_a_500_in_the_routes_shape_and_after_it_nothing_more():
    sent, _ = call(path="/v1/chat/completions", inner=Inner("before"))
    assert refusal(sent) == (500, [], openai_error("the server failed: RuntimeError: boom", "server_error"))
    ollama, _ = call(path="/api/chat", inner=Inner("before"))
    assert refusal(ollama)[2] == {"error": "the server failed: RuntimeError: boom"}
    pathless, _ = call(path=None, inner=Inner("before"))
    assert refusal(pathless)[2]["error"]["type"] == "server_error"  # no path: the OpenAI shape
    started, _ = call(inner=Inner("after"))
    assert [m["type"] for m in started] == ["http.response.start"]  # a second start would break the stream


@pytest.mark.parametrize(
    ("header", "name"), [("[::1]:8080]", None), ("[::1]]", None), ("[::1]::8080", None), ("[::1]:0", None)]
)
def test_bracketed_hosts_take_one_port_after_the_bracket(header, name):
    assert host_name(header) == name


@pytest.mark.parametrize(("port", "valid"), [("1", True), ("65535", True), ("0", False), ("65536", False)])
def test_ports_are_1_to_65535(port, valid):
    assert (host_name(f"localhost:{port}") is not None) is valid


def test_origins_that_say_no_place_and_the_servers_own_origin_in_either_scheme():
    anyone = GateRules(allowed_origins=("*",))
    assert anyone.origin_allowed("null", "x") and anyone.origin_allowed("", "x")
    assert not GateRules().origin_allowed("null", "x") and not GateRules().origin_allowed("NULL", "x")
    named = GateRules(bound_host="0.0.0.0", allowed_hosts=("box.lan",))
    assert named.origin_allowed("https://box.lan:8080", "box.lan:8080") and named.origin_allowed(
        "http://box.lan:8080", "box.lan:8080"
    )
    assert not named.origin_allowed("ftp://box.lan:8080", "box.lan:8080")


def test_the_bound_name_is_matched_whatever_its_case():
    assert GateRules(bound_host="Box.LAN").host_allowed("box.lan:8080")
