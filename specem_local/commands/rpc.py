"""``specem rpc-serve``: ggml's RPC server from the installed llama.cpp, so that another
machine's ensemble can keep a member's layers here (docs/distributed.md).

It is llama.cpp's own server (``ggml_backend_rpc_start_server``), not a home-made one, started
from the same library the client uses, so both speak one protocol version. It has no
authentication and no encryption, so it listens on loopback unless told otherwise, and says
how to reach it safely from elsewhere (an SSH tunnel, a VPN).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading

from specem_local.commands.terminal import check_port_free, whole_number
from specem_local.dirs import cache_dir
from specem_local.errors import SpecemError
from specem_local.models.rpc import DEFAULT_PORT, PROTOCOL, SAFE_REACH, is_loopback


def chosen_devices(wanted: list[str] | None) -> list[str]:
    """The local devices to serve: those named, else every GPU, else the CPU."""
    from specem_local.backend import devices

    local = devices()
    names = [device.name for device in local]
    if wanted:
        unknown = [name for name in wanted if name not in names]
        if unknown:
            raise SpecemError(f"--device {unknown[0]}: no such device here; this machine has {', '.join(names)}")
        return wanted
    gpus = [device.name for device in local if device.kind in ("GPU", "integrated GPU")]
    return gpus or [device.name for device in local if device.kind == "CPU"][:1]


def listening_address(host: str) -> str:
    """The IPv4 address to listen on for ``--host``: ggml-rpc takes an address, not a name, so
    a name (``localhost``) is resolved here."""
    if ":" in host:
        raise SpecemError(f"--host {host}: ggml-rpc listens on IPv4 addresses and names only (127.0.0.1, 0.0.0.0)")
    try:
        return socket.gethostbyname(host)
    except (OSError, UnicodeError):
        raise SpecemError(f"--host {host}: no such name here; give an IPv4 address such as 127.0.0.1") from None


def cmd_rpc_serve(args: argparse.Namespace) -> int:
    host, port = listening_address(args.host), args.port
    if not is_loopback(host) and not args.allow_unauthenticated:
        raise SpecemError(
            f"--host {host} would let anyone who reaches this port use this machine's memory and compute: "
            f"{SAFE_REACH}; to listen there anyway, add --allow-unauthenticated"
        )
    from specem_local.backend import supports_rpc
    from specem_local.backend.devices import serve_rpc

    if not supports_rpc():
        raise SpecemError("this llama.cpp was built without the RPC backend; run ./scripts/setup.sh again")
    names = chosen_devices(args.device)
    check_port_free(host, port, "is another rpc-serve there?")
    cache = str(cache_dir() / "rpc") if args.cache else None
    threads = args.threads or os.cpu_count() or 1
    version = ".".join(map(str, PROTOCOL))
    print(
        f"specem rpc-serve: {', '.join(names)} on {host}:{port} (ggml-rpc {version}, {threads} threads"
        f"{', tensor cache ' + cache if cache else ''}); Ctrl+C stops it",
        flush=True,
    )
    if not is_loopback(host):
        print(f"specem rpc-serve: warning: {SAFE_REACH}", file=sys.stderr, flush=True)
    server = threading.Thread(target=serve_rpc, args=(f"{host}:{port}", cache, threads, names), daemon=True)
    server.start()
    try:
        while server.is_alive():
            server.join(0.5)
    except KeyboardInterrupt:
        print("specem rpc-serve: stopped", file=sys.stderr)
        return 130
    raise SpecemError(f"the RPC server on {host}:{port} stopped; its reason is printed above")


def add_parser(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "rpc-serve", help="offer this machine's CPU or GPU to an ensemble elsewhere (llama.cpp's RPC server)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve.add_argument("--port", type=whole_number(1, 65535), default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    serve.add_argument("--threads", type=whole_number(1, 1024), help="CPU threads (default: every core)")
    serve.add_argument(
        "--device",
        action="append",
        metavar="NAME",
        help="a local device to offer, e.g. CUDA0 or CPU (repeat; default: every GPU, else the CPU)",
    )
    serve.add_argument(
        "--cache", action="store_true", help="keep received tensors on disk, so a reload is not sent again"
    )
    serve.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="listen beyond loopback although ggml-rpc has no authentication nor encryption",
    )
    serve.set_defaults(handler=cmd_rpc_serve)
