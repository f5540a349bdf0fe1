"""The gate's rules as plain functions: which Host headers and origins may use the server."""

from __future__ import annotations

import pytest

from specem_local.server.app import json_depth
from specem_local.server.errors import HttpError
from specem_local.server.gate import GateRules, host_name, split_origins

LOCAL = GateRules()


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8080", "127.0.0.1"),
        ("LOCALHOST", "localhost"),
        ("[::1]:8080", "::1"),
        ("[::1]", "::1"),
        ("example.com", "example.com"),
        ("", None),
        ("[::1", None),
        ("[::1]x", None),
        ("host:notaport", None),
        ("host:99999", None),
        (":8080", None),
    ],
)
def test_host_names(header, name):
    assert host_name(header) == name


@pytest.mark.parametrize(
    "header", ["127.0.0.1:8080", "127.0.0.2", "localhost:1", "[::1]:8080", "app.localhost:3000", "localhost"]
)
def test_loopback_hosts_are_allowed(header):
    assert LOCAL.host_allowed(header)


@pytest.mark.parametrize(
    "header", ["evil.example.com:18080", "evil.example.com", "192.168.1.5:8080", "", "localhost.evil.com", "[::1"]
)
def test_other_hosts_are_refused_on_loopback(header):
    assert not LOCAL.host_allowed(header)


def test_the_bound_host_and_allowed_names_are_taken():
    rules = GateRules("0.0.0.0", ("mybox.lan",))
    assert rules.host_allowed("mybox.lan:8080") and rules.host_allowed("MyBox.lan")
    assert rules.host_allowed("192.168.1.5:8080")  # an address the client dialled: no rebinding
    assert not rules.host_allowed("evil.example.com")
    assert GateRules("10.0.0.2").host_allowed("10.0.0.2:8080")
    assert not GateRules("10.0.0.2").host_allowed("10.0.0.3:8080")
    assert GateRules(allowed_hosts=("*",)).host_allowed("anything.example")


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost",
        "http://localhost:3000",
        "https://127.0.0.1:8443",
        "http://[::1]:5173",
        "vscode-webview://abc",
        "app://obsidian.md",
        "file://",  # a local file's page (the trailing-slash strip made it "file:" and refused it)
        "file:///",
        "app://",
    ],
)
def test_local_origins_are_allowed(origin):
    assert LOCAL.origin_allowed(origin, "127.0.0.1:8080")


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example.com",
        "https://localhost.evil.com",
        "null",
        "",
        "http://127.0.0.1.evil.com",
        "ftp://localhost",
        "http://localhost:3000.evil.com",  # "*" after a colon is a port's digits, not any characters
        "http://localhost:abc",
        "http://[::1]:80.evil.com",
    ],
)
def test_other_origins_are_refused(origin):
    assert not LOCAL.origin_allowed(origin, "127.0.0.1:8080")


def test_allowed_origins_patterns_and_the_servers_own_origin():
    rules = GateRules(allowed_origins=split_origins(["https://chat.example.com, http://*.corp.example", ""]))
    assert rules.origin_allowed("https://chat.example.com", "127.0.0.1:8080")
    assert rules.origin_allowed("http://a.corp.example", "127.0.0.1:8080")
    assert not rules.origin_allowed("http://a.b.corp.example", "127.0.0.1:8080")  # "*" is one label
    assert not rules.origin_allowed("http://evil.com/.corp.example", "127.0.0.1:8080")
    assert not rules.origin_allowed("https://other.example.com", "127.0.0.1:8080")
    assert LOCAL.origin_allowed("http://mybox.lan:8080", "mybox.lan:8080")  # same origin
    assert GateRules(allowed_origins=("*",)).origin_allowed("null", "127.0.0.1")


def test_errors_take_the_shape_of_the_route():
    assert HttpError(400, "no").body("/api/chat") == {"error": "no"}
    assert HttpError(400, "no", "invalid_request_error", "seed").body("/v1/x")["error"]["param"] == "seed"


@pytest.mark.parametrize(
    ("body", "depth"),
    [
        (b"{}", 1),
        (b'{"a": [1, [2, {"b": 3}]]}', 4),
        (b'{"a": "[[[[[[[["}', 1),
        (b'{"a": "\\"[[[["}', 1),
        (b"[" * 100_000, 100_000),
        (b'"\\"' * 100_000, 0),  # an unterminated string full of escapes: linear, no brackets
        (b"", 0),
    ],
)
def test_json_depth_skips_strings(body, depth):
    assert json_depth(body) == depth
