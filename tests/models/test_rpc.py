"""Members on other machines (issue 28) without llama.cpp: endpoints, the one-member-per-server
rule, and the probe against fake servers (nothing listening, busy, another version, not ggml-rpc)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from specem_local.errors import SpecemError
from specem_local.models.config import parse_config
from specem_local.models.rpc import (
    CONNECTION_CAPS,
    HELLO_COMMAND,
    PROTOCOL,
    Endpoint,
    RpcUnavailable,
    is_loopback,
    parse_endpoint,
    probe,
    shared_endpoints,
)


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [
        ("127.0.0.1:50052", Endpoint("127.0.0.1", 50052)),
        ("gpu-box:1", Endpoint("gpu-box", 1)),
        ("[::1]:5", Endpoint("::1", 5)),
    ],
)
def test_endpoints_are_host_and_port(text, endpoint):
    assert parse_endpoint(text) == endpoint


@pytest.mark.parametrize("text", ["", "host", ":50052", "host:", "host:0", "host:65536", "host:port", "a b:1"])
def test_what_is_not_host_and_port_says_so(text):
    with pytest.raises(ValueError, match="is not host:port"):
        parse_endpoint(text)


def test_loopback_and_one_member_per_server():
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2") and not is_loopback("gpu-box")
    assert shared_endpoints({"a": ("h:1",), "b": ("h:2",)}) is None
    assert shared_endpoints({"a": ("h:1",), "b": ("x:3", "h:1")}) == ("h:1", "a", "b")


def test_models_toml_checks_rpc_entries():
    def config(*rpcs: str):
        tables = "".join(f'[[models]]\nname = "m{i}"\npath = "/m{i}.gguf"\nrpc = {rpc}\n' for i, rpc in enumerate(rpcs))
        return parse_config(tables, "models.toml", Path("."))

    assert config('["127.0.0.1:50052", "box:50053"]').models[0].rpc == ("127.0.0.1:50052", "box:50053")
    for rpcs, message in (
        (('["nohost"]',), "rpc entry 'nohost' is not host:port"),
        (('"h:1"',), "rpc must be an array of strings"),
        (('["h:1", "h:1"]',), "listed twice"),
        (('["h:1"]', '["h:1"]'), "both use the RPC server h:1"),
        (('["h:1"]\nn_gpu_layers = 0',), "its rpc servers would hold none"),
    ):
        with pytest.raises(SpecemError, match=message):
            config(*rpcs)


class FakeServer:
    """A loopback TCP server that answers each connection with ``reply`` (bytes, or None to
    stay silent, like a ggml-rpc server busy with another client)."""

    def __init__(self, reply: bytes | None) -> None:
        self.reply = reply
        self.received: list[bytes] = []
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.endpoint = Endpoint("127.0.0.1", self.socket.getsockname()[1])
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                greeting = b""
                try:
                    while len(greeting) < 9 + CONNECTION_CAPS:
                        chunk = connection.recv(64)
                        if not chunk:
                            break
                        greeting += chunk
                except OSError:
                    pass
                self.received.append(greeting)
                if self.reply is None:
                    time.sleep(3)
                    continue
                connection.sendall(self.reply)

    def close(self) -> None:
        self.socket.close()


def hello_reply(major: int, minor: int, patch: int) -> bytes:
    return struct.pack("<Q", 4 + CONNECTION_CAPS) + bytes([major, minor, patch, 0]) + bytes(CONNECTION_CAPS)


def test_a_server_of_this_version_answers_the_greeting():
    server = FakeServer(hello_reply(*PROTOCOL))
    try:
        assert probe(server.endpoint) == PROTOCOL
        assert server.received[0] == struct.pack("<BQ", HELLO_COMMAND, CONNECTION_CAPS) + bytes(CONNECTION_CAPS)
    finally:
        server.close()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (hello_reply(PROTOCOL[0] + 1, 0, 0), "speaks RPC protocol 8.0.0 and this llama.cpp speaks 7.0.0"),
        (hello_reply(PROTOCOL[0], PROTOCOL[1] + 1, 0), "run the same specem-local"),
        (b"", "closed the connection at the greeting"),
        (struct.pack("<Q", 3) + b"abc", "something other than a ggml-rpc server"),
    ],
)
def test_what_would_abort_llama_cpp_is_a_reason(reply, message):
    server = FakeServer(reply)
    try:
        with pytest.raises(RpcUnavailable, match=message):
            probe(server.endpoint)
    finally:
        server.close()


def test_a_busy_server_is_a_reason_within_the_timeout():
    server = FakeServer(None)
    try:
        started = time.monotonic()
        with pytest.raises(RpcUnavailable, match="busy with another client"):
            probe(server.endpoint, timeout=0.5)
        assert time.monotonic() - started < 2
    finally:
        server.close()


def test_nothing_listening_says_how_to_start_it():
    with socket.create_server(("127.0.0.1", 0)) as free:
        port = free.getsockname()[1]
    with pytest.raises(RpcUnavailable, match="nothing is listening there; start it with: specem rpc-serve"):
        probe(Endpoint("127.0.0.1", port))


def test_rpc_serve_refuses_what_it_should_in_one_line(capsys):
    from specem_local.commands.cli import main

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        for args, message in (
            (["--host", "0.0.0.0"], "ssh -N -L 50052:127.0.0.1:50052"),
            (["--host", "192.168.1.5", "--port", "5"], "--allow-unauthenticated"),
            (["--host", "::1"], "IPv4 addresses and names only"),
            (["--port", port], f"cannot listen on 127.0.0.1:{port}"),
            (["--device", "CUDA7"], "--device CUDA7: no such device here; this machine has CPU"),
        ):
            assert main(["rpc-serve", *args]) == 1
            error = capsys.readouterr().err
            assert message in error and error.count("\n") == 1, error
