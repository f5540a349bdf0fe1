"""The ``specem`` command line: ``models list|pull|verify``, ``run``, ``bench``, ``eval``.

A thin consumer of the library: every failure the user can fix arrives as a ``SpecemError``
and is printed as one line, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Sequence

from specem_local.commands import history as history_commands
from specem_local.commands import models as model_commands
from specem_local.commands import rpc as rpc_commands
from specem_local.commands import run as run_command
from specem_local.commands import weights as weights_commands
from specem_local.commands.terminal import (
    add_mcp_flags,
    add_settings_flags,
    check_port_free,
    config_from_args,
    interrupted_code,
    printable,
    recording_off,
    settings_overrides,
    stop_on_termination,
    whole_number,
)
from specem_local.errors import SettingError, SpecemError
from specem_local.models.config import builtin_ensembles


def cmd_serve(args: argparse.Namespace) -> int:
    from specem_local.engine import Ensemble
    from specem_local.server import EnsembleServer, GateRules, ServerOptions, check_binding, run_until_stopped
    from specem_local.server.gate import split_origins

    api_key = args.api_key or os.environ.get("SPECEM_API_KEY") or None
    check_binding(args.host, api_key)
    check_port_free(args.host, args.port, "is another server there?")  # before the models load, not after
    origins = split_origins([*args.allow_origin, os.environ.get("SPECEM_ORIGINS", "")])
    gate = GateRules(args.host, tuple(args.allowed_host), origins, api_key)
    options = ServerOptions(args.queue, args.max_body_bytes, not recording_off(args.no_log), gate)
    with contextlib.ExitStack() as running:
        mcp = None
        if args.mcp is not None:  # a bad config is one line before anything starts, or any model loads
            from specem_local.mcp import McpTools, read_config

            servers = read_config(args.mcp)
            mcp = running.enter_context(
                McpTools.start(servers, start_seconds=args.mcp_timeout, call_seconds=args.mcp_timeout)
            )
            for problem in mcp.problems:
                print(f"specem: warning: {printable(problem)}", file=sys.stderr, flush=True)
        ensemble = running.enter_context(Ensemble.from_config(config_from_args(args), **settings_overrides(args)))
        server = EnsembleServer(ensemble, options, mcp=mcp)
        where = f"http://{args.host}:{args.port}/v1"
        print(f"specem serve: {where} serves {', '.join(ensemble.model_names)} as model 'specem'", flush=True)
        if mcp is not None:
            labels = ", ".join(repr(each.label) for each in server.mcp_servers or ()) or "none"
            print(f"specem serve: MCP servers for the Responses API's mcp tools: {labels}", flush=True)
        run_until_stopped(server, args.host, args.port, args.log_level)
    return 0


# -- wiring ----------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specem", description="Several local LLMs answer together (SpecEM).")
    parser.add_argument("--version", action="version", version="specem-local 0.1.0")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        help="models.toml to use (default: $SPECEM_CONFIG, ./models.toml, "
        "the user config dir, the built-in demo ensemble)",
    )
    common.add_argument(
        "--ensemble", metavar="NAME", help=f"a built-in ensemble instead: {', '.join(builtin_ensembles())}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    model_commands.add_parser(commands, common)
    history_commands.add_parser(commands)

    weights_commands.add_parser(commands, common)
    rpc_commands.add_parser(commands)
    run_command.add_parser(commands, common)

    serve = commands.add_parser("serve", parents=[common], help="an OpenAI-compatible endpoint on this machine")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    serve.add_argument("--port", type=whole_number(1, 65535), default=8080, help="port (default 8080)")
    serve.add_argument("--api-key", help="require Authorization: Bearer KEY on every route (or SPECEM_API_KEY)")
    serve.add_argument(
        "--queue", type=whole_number(0, 10_000), default=4, help="requests that may wait for the models (default 4)"
    )
    serve.add_argument(
        "--max-body-bytes",
        type=whole_number(1024, 1 << 30),
        default=1 << 20,
        help="largest request body (default 1 MiB)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name besides localhost and IP addresses that clients may use to reach this server "
        "(repeatable; * for any)",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web page origin that may use the models, e.g. http://myapp.example:3000, * as a wildcard "
        "(repeatable; also SPECEM_ORIGINS, comma-separated); loopback pages are always allowed",
    )
    serve.add_argument(
        "--no-log", action="store_true", help="do not record the answers in the history (or set SPECEM_NO_LOG=1)"
    )
    serve.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    add_mcp_flags(serve, 'a Responses API request opts in with {"type": "mcp", "server_label": NAME}; run here')
    add_settings_flags(serve)
    serve.set_defaults(handler=cmd_serve)

    from specem_local.commands import calibrate
    from specem_research import adaptive, bench, evaluate, pool

    bench.add_parser(commands, common)
    calibrate.add_parser(commands, common)
    evaluate.add_parser(commands, common)
    pool.add_parser(commands)
    adaptive.add_parser(commands)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    warnings.showwarning = lambda message, *_rest, **_kw: print(f"specem: {message}", file=sys.stderr)
    stop_on_termination()
    try:
        return args.handler(args)
    except SpecemError as error:
        print(f"specem: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, SettingError) else 1  # a bad setting is a usage error, as argparse's
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt as stopped:  # before an answer streams (loading, calibrating, ...): stop at once
        print("\n[stopped]", file=sys.stderr)
        return interrupted_code(stopped)


if __name__ == "__main__":
    sys.exit(main())
