"""MCP servers' tools for the ensemble: a config in the common ``mcpServers`` shape
(``config``), each stdio server started and its tools offered as the engine's tool specs and
called from synchronous code (``host``: the sessions on an event loop thread of their own),
their listings and results as the models read them (``listing``, pure).

May import: ``errors``, ``dirs`` (the foundation) and the ``mcp`` SDK. The front ends
(``commands``, ``server``, the chat app) use this face.
"""

from specem_local.mcp.config import ServerConfig, read_config, servers_from
from specem_local.mcp.host import CALL_SECONDS, START_SECONDS, McpTools
from specem_local.mcp.listing import Offered, result_text

__all__ = [
    "CALL_SECONDS",
    "START_SECONDS",
    "McpTools",
    "Offered",
    "ServerConfig",
    "read_config",
    "result_text",
    "servers_from",
]
