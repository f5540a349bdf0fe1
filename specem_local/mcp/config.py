"""An MCP config file in the shape every host reads (Claude Desktop, LM Studio's ``mcp.json``,
llama.cpp's ``--mcp-servers-config``, Cursor): ``{"mcpServers": {"NAME": {"command": ...,
"args": [...], "env": {...}, "cwd": ...}}}``. Only stdio servers are started; anything else is
a one-line ``SettingError`` (field ``mcp``) naming the server and what is wrong, said before
any server starts. Pure: nothing runs here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specem_local.dirs import read_text
from specem_local.errors import SettingError, SpecemError

FIELD = "mcp"
TRANSPORTS = ("stdio",)  # what a server's "type" may say; "sse", "http" and a "url" are refused


@dataclass(frozen=True)
class ServerConfig:
    """One stdio MCP server: the command that starts it, its arguments, the environment it
    adds to the few variables the SDK passes on (PATH, HOME, ...), and the folder it runs in."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None


def read_config(path: str | Path) -> tuple[ServerConfig, ...]:
    """The servers a config file names, in its order (``"disabled": true`` ones left out)."""
    where = f"MCP config {path}"
    try:
        text = read_text(Path(path).expanduser(), "MCP config")
    except SpecemError as error:  # a missing file, a folder, not UTF-8
        raise SettingError(str(error), FIELD) from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise SettingError(f"{where}: not JSON ({error})"[:300], FIELD) from None
    return servers_from(data, where)


def servers_from(data: Any, where: str = "MCP config") -> tuple[ServerConfig, ...]:
    """The servers of a config already parsed from JSON."""
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise SettingError(
            f'{where}: no "mcpServers" object; write {{"mcpServers": {{"NAME": {{"command": ...}}}}}}', FIELD
        )
    return tuple(
        _server(name, entry, f"{where}: server {name!r}")
        for name, entry in servers.items()
        if not (isinstance(entry, dict) and entry.get("disabled") is True)
    )


def _server(name: str, entry: Any, where: str) -> ServerConfig:
    if not name.strip():
        raise SettingError(f"{where}: a server needs a name", FIELD)
    if not isinstance(entry, dict):
        raise SettingError(f'{where} must be an object with a "command"', FIELD)
    transport = entry.get("type", entry.get("transport", "stdio"))
    if "url" in entry or "serverUrl" in entry or transport not in TRANSPORTS:
        kind = transport if transport not in TRANSPORTS else "url"
        raise SettingError(f"{where} is a {kind} server; only stdio servers (a command) are supported", FIELD)
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise SettingError(f'{where} has no "command" (the program that starts it)', FIELD)
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise SettingError(f'{where}: "args" must be a list of strings', FIELD)
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(value, str) for value in env.values()):
        raise SettingError(f'{where}: "env" must be an object of strings', FIELD)
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise SettingError(f'{where}: "cwd" must be a folder\'s path', FIELD)
    return ServerConfig(name, command, tuple(args), dict(env), str(Path(cwd).expanduser()) if cwd else None)
