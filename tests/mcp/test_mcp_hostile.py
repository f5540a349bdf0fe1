"""MCP servers that misbehave as real ones do, through ``McpTools``: a server's own error with
the SDK's code for a closed connection, a line on stdout that is not JSON-RPC, a byte that is
not UTF-8, a ``cwd`` that is not a folder, a server with no tools; each said in one line, and
the next call answered."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from specem_local.mcp import McpTools
from specem_local.mcp.host import OneLine, said_in_one_line
from tests.mcp.servers import write_config

RAW = Path(__file__).with_name("raw_server.py")


def raw(*flags: str, **more: str) -> dict:
    return {"command": sys.executable, "args": [str(RAW), *flags], **more}


def test_a_servers_own_error_is_its_message_and_odd_output_never_wedges_it(tmp_path):
    config = write_config(tmp_path / "mcp.json", {"raw": raw()})
    with McpTools.start(config, start_seconds=10, call_seconds=5) as tools:
        assert tools.problems == []
        assert tools.call("coded", {}) == "error: the MCP server 'raw': no such file: /x"  # not "has stopped"
        assert tools.call("echo", {"text": "still here"}) == "still here"
        assert tools.call("latin", {}) == "latin"  # a byte that is not UTF-8 went before it
        assert tools.call("echo", {"text": "and here"}) == "and here"
        assert tools.call("junk", {}) == "junk"  # a banner line went before it
        assert tools.call("echo", {"text": "after"}) == "after"


def test_a_cwd_that_is_not_a_folder_and_a_server_without_tools_are_one_line_each(tmp_path):
    missing = tmp_path / "no-such-folder"
    config = write_config(tmp_path / "mcp.json", {"nowhere": raw(cwd=str(missing)), "bare": raw("no-tools")})
    with McpTools.start(config, start_seconds=10, call_seconds=5) as tools:
        problems = tools.problems
    assert problems == [
        f"the MCP server 'nowhere' could not be started (its cwd {missing} is not a folder); its tools are left out",
        "the MCP server 'bare' lists no tools",
    ]


def test_the_sdks_warnings_are_one_line_on_stderr_unless_a_program_set_up_logging(monkeypatch, capsys):
    sdk = logging.getLogger("mcp")
    monkeypatch.setattr(sdk, "handlers", [])
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.NullHandler()])  # a program's own
    said_in_one_line()
    assert sdk.handlers == []
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # none: Python would print a traceback
    said_in_one_line()
    said_in_one_line()
    assert [type(h) for h in sdk.handlers] == [OneLine]
    try:
        raise ValueError("Invalid JSON: expected value at line 1 column 1\n  input: 'ready'")
    except ValueError:
        logging.getLogger("mcp.client.stdio").exception("Failed to parse JSONRPC message from server")
    logging.getLogger("mcp.client.stdio").info("chatter")  # below a warning: not said
    assert capsys.readouterr().err == "specem: note: MCP: Failed to parse JSONRPC message from server\n"
