"""What the ``specem`` commands share: tables, and the settings as flags.

Every ``[ensemble]`` setting becomes a flag, grouped as in ``settings.GROUPS`` and derived
from the one description in ``settings``, so ``specem run --help`` lists them all with their
help and limits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from specem_local.errors import SpecemError
from specem_local.models.config import Config, load_config, with_load_overrides
from specem_local.setting_fields import Setting, describe
from specem_local.settings import GROUPS, EnsembleSettings, LoadSettings
from specem_local.text import printable

_CONVERTERS = {"int": int, "float": float, "str": str}


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [list(headers), *([printable(str(cell)) for cell in row] for row in rows)]  # text from files and users
    widths = [max(len(cell) for cell in column) for column in zip(*cells)]
    for line in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


def add_settings_flags(parser: argparse.ArgumentParser, *, load: bool = True) -> None:
    """One flag per setting (``--segment-tokens``, ``--no-feedback``, ...), in its group;
    ``load`` adds the load-time ones (``--threads-per-model``)."""
    settings = [*describe(EnsembleSettings), *(describe(LoadSettings) if load else ())]
    for group, title in GROUPS.items():
        members = [item for item in settings if item.group == group]
        if members:
            argument_group = parser.add_argument_group(f"{title} (override models.toml [ensemble])")
            for item in members:
                _add_flag(argument_group, item)


def _add_flag(group: argparse._ArgumentGroup, item: Setting) -> None:
    limits = item.limits.describe()
    help_text = f"{item.help} (default {item.default!r}{'; ' + limits if limits and not item.limits.choices else ''})"
    if item.kind == "bool":
        group.add_argument(
            item.flag, dest=item.name, action=argparse.BooleanOptionalAction, default=None, help=help_text
        )
    elif item.kind == "strings":
        help_text = f"{item.help}; repeat for several"
        group.add_argument(item.flag, dest=item.name, action="append", default=None, metavar="TEXT", help=help_text)
    else:
        group.add_argument(
            item.flag,
            dest=item.name,
            type=_CONVERTERS[item.kind],
            choices=item.limits.choices or None,
            default=None,
            metavar=None if item.limits.choices else {"str": "TEXT"}.get(item.kind, item.kind.upper()),
            help=help_text,
        )


def settings_overrides(args: argparse.Namespace, cls: type = EnsembleSettings) -> dict[str, Any]:
    """The settings of ``cls`` given on the command line (flags left out are not overrides)."""
    values = {item.name: getattr(args, item.name, None) for item in describe(cls)}
    return {
        key: tuple(value) if isinstance(value, list) else value for key, value in values.items() if value is not None
    }


def config_from_args(args: argparse.Namespace) -> Config:
    """models.toml (``--config`` or the lookup), with the load-time settings given as flags."""
    config = load_config(args.config, getattr(args, "ensemble", None))
    return with_load_overrides(config, settings_overrides(args, LoadSettings))[0]


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high], else a usage error (exit 2) that says so."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in [{low}, {high}]")
        return value

    return parse


def recording_off(no_log_flag: bool) -> bool:
    """Whether this command records nothing in the history: ``--no-log``, or ``SPECEM_NO_LOG``
    set to anything but empty or 0 (a privacy switch for every command that records)."""
    return no_log_flag or os.environ.get("SPECEM_NO_LOG", "").strip() not in ("", "0")


def check_port_free(host: str, port: int, hint: str) -> None:
    """Fail early, in one line, when something already listens on ``host:port``: before the
    models load (a server), or where ggml would print "Failed to create server socket"."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (OSError, UnicodeError):
        family = socket.AF_INET  # a name uvicorn or ggml will refuse in its own words
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise SpecemError(
                f"cannot listen on {host}:{port} ({error.strerror or error}); {hint} choose another --port"
            ) from None


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the command is, so it unwinds as Ctrl-C does (the answer
    recorded as stopped, the members and their workers closed); the exit code is 128 + the
    signal's number, as a shell reports a process the signal ended."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


def stop_on_termination() -> None:
    """SIGTERM and SIGHUP raise ``Terminated`` in the main thread (called from it)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def terminated(number: int, _frame: object) -> None:
        raise Terminated(number)

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), terminated)


def ignore_stop_signals() -> None:
    """The command is stopping: a second Ctrl-C (or SIGTERM / SIGHUP) is ignored, so the stop runs
    to its end (the answer recorded, the models freed; a model freed halfway crashes at exit)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


@contextlib.contextmanager
def stopping_cleanly() -> Iterator[None]:
    """Inside an ``Ensemble``'s ``with`` (listed after it): a stop signal ignores the next ones
    before the ensemble closes."""
    try:
        yield
    except KeyboardInterrupt:
        ignore_stop_signals()
        raise


def interrupted_code(error: KeyboardInterrupt) -> int:
    """The exit code for Ctrl-C (130) or a termination signal."""
    return 128 + error.number if isinstance(error, Terminated) else 130


def add_mcp_flags(parser: Any, what: str) -> None:
    """``--mcp CONFIG`` (``what``: whose loop runs the tools) and ``--mcp-timeout``, as ``specem run``
    and ``specem serve`` take them."""
    parser.add_argument(
        "--mcp",
        metavar="CONFIG",
        help=f'MCP servers\' tools (a JSON file, {{"mcpServers": ...}}; stdio servers): {what}',
    )
    parser.add_argument(
        "--mcp-timeout",
        type=whole_number(1, 3600),
        default=60,
        metavar="SECONDS",
        help="with --mcp: how long a server may take to start, and a call to answer (default 60)",
    )
