"""Members on other machines through llama.cpp's RPC backend (ggml-rpc): endpoints and the
check made before a model is sent to one (pure Python, no llama.cpp).

ggml-rpc ends the client process (``GGML_ABORT``) when a server cannot be reached, answers
with another protocol version, or goes away; a second client waits until the first is done.
So before loading a member whose ``rpc`` names servers, each one is probed here, with a
timeout, by the protocol's own greeting (``HELLO``: command 14, then the server's version);
what would have been an abort or a hang is a one-line ``SpecemError`` naming the endpoint.
ggml-rpc has no authentication and no encryption: ``specem rpc-serve`` stays on loopback
unless told otherwise (docs/distributed.md).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from specem_local.errors import SpecemError

# The protocol of the ggml in llama-cpp-python 0.3.36 (ggml-rpc.h; tests check the installed
# library answers with it). A server with another major version, or a newer minor one, is refused.
PROTOCOL = (7, 0, 0)
DEFAULT_PORT = 50052
HELLO_COMMAND = 14
CONNECTION_CAPS = 24  # bytes of transport capabilities in a HELLO (zeros: plain TCP)
PROBE_SECONDS = 5.0
SAFE_REACH = (
    "ggml-rpc has no authentication and no encryption; reach a server on another machine through "
    "an SSH tunnel (ssh -N -L 50052:127.0.0.1:50052 that-machine) or a VPN such as WireGuard"
)


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """``host:port`` (``[::1]:50052`` for IPv6) as an endpoint; a one-line error otherwise."""
    host, colon, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535 or any(c.isspace() for c in host):
        raise ValueError(f"{text!r} is not host:port (for example 192.168.1.20:{DEFAULT_PORT} or 127.0.0.1:50053)")
    return Endpoint(host, int(port))


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (localhost, 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def shared_endpoints(rpc_by_model: dict[str, tuple[str, ...]]) -> tuple[str, str, str] | None:
    """An endpoint two members name (endpoint, first, second), or None. A ggml-rpc server
    serves one client at a time and one model's layers per member: one member per endpoint."""
    seen: dict[Endpoint, str] = {}
    for model, endpoints in rpc_by_model.items():
        for text in endpoints:
            endpoint = parse_endpoint(text)
            if endpoint in seen and seen[endpoint] != model:
                return str(endpoint), seen[endpoint], model
            seen[endpoint] = model
    return None


class RpcUnavailable(Exception):
    """An RPC server cannot take this member now: the reason, in words."""


def probe(endpoint: Endpoint, timeout: float = PROBE_SECONDS) -> tuple[int, int, int]:
    """Greet the server at ``endpoint`` and return its protocol version; ``RpcUnavailable``
    says why it cannot be used (nothing listening, busy with another client, not a ggml-rpc
    server, another version). The connection is closed before the model loads."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout) as connection:
            connection.settimeout(timeout)
            connection.sendall(struct.pack("<BQ", HELLO_COMMAND, CONNECTION_CAPS) + bytes(CONNECTION_CAPS))
            size = struct.unpack("<Q", _receive(connection, 8))[0]
            if size != 4 + CONNECTION_CAPS:
                raise RpcUnavailable(f"it answered like something other than a ggml-rpc server ({size}-byte reply)")
            major, minor, patch = _receive(connection, size)[:3]
    except TimeoutError:
        raise RpcUnavailable(
            f"no answer within {timeout:g} s: the server is busy with another client (ggml-rpc serves one at a "
            "time), or this is not a ggml-rpc server"
        ) from None
    except ConnectionRefusedError:
        raise RpcUnavailable("nothing is listening there; start it with: specem rpc-serve") from None
    except OSError as error:
        raise RpcUnavailable(f"cannot reach it ({error.strerror or error})") from None
    if major != PROTOCOL[0] or minor > PROTOCOL[1]:
        mine = ".".join(map(str, PROTOCOL))
        raise RpcUnavailable(
            f"it speaks RPC protocol {major}.{minor}.{patch} and this llama.cpp speaks {mine}; run the same "
            "specem-local (llama-cpp-python) version on both machines"
        )
    return major, minor, patch


def probe_all(servers: Sequence[str], refusal: str) -> None:
    """Probe each server in turn; the first that cannot be used is a ``SpecemError`` that says
    ``refusal`` (its ``{endpoint}`` filled in) and why."""
    for text in servers:
        endpoint = parse_endpoint(text)
        try:
            probe(endpoint)
        except RpcUnavailable as why:
            raise SpecemError(f"{refusal.replace('{endpoint}', str(endpoint))}: {why}") from None


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise RpcUnavailable("it closed the connection at the greeting: not a ggml-rpc server of this version")
        data += chunk
    return data
