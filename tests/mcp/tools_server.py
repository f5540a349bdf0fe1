"""An MCP stdio server for the tests, written with the SDK's MCPServer (FastMCP before mcp 2):
a tool that adds two numbers, one that raises, one that sleeps past any test's timeout, and
one whose name no engine tool may have. Run as ``python tools_server.py``."""

from __future__ import annotations

import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("tools-for-tests")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def fail(why: str) -> str:
    """Always raises."""
    raise ValueError(f"it broke: {why}")


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "woke"


@server.tool(name="say.hello")
def say_hello(name: str) -> str:
    """Greet someone (a name with a dot, which a tool name may not have)."""
    return f"Hello, {name}!"


if __name__ == "__main__":
    server.run()
