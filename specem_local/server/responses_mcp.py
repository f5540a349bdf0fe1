"""The MCP servers' tools on OpenAI's Responses API: a request's ``{"type": "mcp",
"server_label": NAME}`` tools checked against the servers ``specem serve --mcp`` started
(``McpServer``), a ``tool_choice`` naming one of their tools, and an earlier ``mcp_call`` item
read back as the call and its result. ``responses_output.py`` writes their ``mcp_list_tools``
and ``mcp_call`` items; ``mcp_rounds.py`` runs the loop.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specem_local.mcp import Offered
from specem_local.server.errors import ApiError

MCP_ITEMS = ("mcp_list_tools", "mcp_call")


@dataclass(frozen=True)
class McpServer:
    """An MCP server of ``specem serve --mcp``: its label (its name in the config), its tools as
    the models are offered them, and why it has none when it did not start (``error``)."""

    label: str
    tools: tuple[Offered, ...] = ()
    error: str | None = None


def mcp_names(servers: Sequence[McpServer]) -> dict[tuple[str, str], str]:
    """(server label, the server's own tool name) -> the name the models call it by."""
    return {(server.label, tool.tool): tool.name for server in servers for tool in server.tools}


def mcp_call_messages(
    item: dict[str, Any],
    where: str,
    names: dict[tuple[str, str], str],
    messages: list[dict[str, Any]],
    turn: dict[str, Any] | None,
) -> dict[str, Any]:
    """An ``mcp_call`` item (the server ran it) as an assistant's call, added to ``turn`` (the
    assistant message of the calls just before it, if any), and its result; the turn it is in."""
    label, name = item_text(item, "server_label", where), item_text(item, "name", where)
    call = {
        "id": item_text(item, "id", where),
        "type": "function",
        "function": {"name": names.get((label, name), name), "arguments": item_text(item, "arguments", where)},
    }
    if turn is None:
        turn = {"role": "assistant", "content": None, "tool_calls": []}
        messages.append(turn)
    turn["tool_calls"].append(call)
    output, error = item.get("output"), item.get("error")
    if isinstance(output, str):
        result = output
    elif error is not None:
        said = error if isinstance(error, str) else _error_text(error)
        result = said if said.startswith("error: ") else f"error: {said}"
    else:
        result = "error: the call was not run"
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return turn


def _error_text(error: Any) -> str:
    """A failed ``mcp_call``'s ``error`` sent back: its ``message`` (a protocol or HTTP error),
    or its text content (a tool's own error), else its JSON."""
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    content = error.get("content") if isinstance(error, dict) else None
    parts = content if isinstance(content, list) else []
    texts = [part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str)]
    if texts and len(texts) == len(parts):
        return "\n".join(texts)
    return json.dumps(error, ensure_ascii=False)


def item_text(item: dict[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise ApiError(400, f"{where}.{name} must be text", f"{where}.{name}")
    return value


def mcp_tool(
    tool: dict[str, Any], where: str, servers: Sequence[McpServer] | None, chosen: list[McpServer]
) -> McpServer:
    """An MCP tool: the server of ``--mcp`` it names (``server_label``), with the tools it
    allows (``allowed_tools``: the server's tool names, or ``{"tool_names": [...]}``). A remote
    server, an approval asked for or a server not offered is a 400 naming the field."""
    labels = ", ".join(repr(server.label) for server in servers or ())
    offered = (
        "this server was started without --mcp, so it offers no MCP servers (start it with specem serve --mcp CONFIG)"
        if servers is None
        else f"this server offers the MCP servers {labels} (specem serve --mcp)"
        if labels
        else "this server's --mcp config names no MCP server"
    )
    for key in ("server_url", "connector_id", "tunnel_id"):
        if tool.get(key) is not None:
            raise ApiError(400, f"{where}.{key}: remote MCP servers are not reached by specem; {offered}",
                           f"{where}.{key}")  # fmt: skip
    label = tool.get("server_label")
    if not isinstance(label, str) or not label:
        raise ApiError(400, f"{where}.server_label must name an MCP server; {offered}", f"{where}.server_label")
    server = next((server for server in servers or () if server.label == label), None)
    if server is None:
        raise ApiError(400, f"{where}.server_label: no MCP server {label[:60]!r} here; {offered}",
                       f"{where}.server_label")  # fmt: skip
    if any(other.label == label for other in chosen):
        raise ApiError(400, f"{where}.server_label: the MCP server {label!r} is given twice", f"{where}.server_label")
    if tool.get("require_approval") not in (None, "never"):
        raise ApiError(400, f'{where}.require_approval: approvals are not asked here (give "never" or leave it '
                            "out): whoever started this server approved the tools of its --mcp servers",
                       f"{where}.require_approval")  # fmt: skip
    allowed = tool.get("allowed_tools")
    if allowed is None:
        return server
    names = allowed.get("tool_names") if isinstance(allowed, dict) else allowed
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ApiError(400, f'{where}.allowed_tools must be a list of tool names, or {{"tool_names": [...]}}',
                       f"{where}.allowed_tools")  # fmt: skip
    known = {tool.tool for tool in server.tools} | {tool.name for tool in server.tools}
    unknown = [name for name in names if name not in known]
    if unknown:
        listed = ", ".join(repr(tool.tool) for tool in server.tools) or "none"
        raise ApiError(400, f"{where}.allowed_tools: the MCP server {label!r} has no tool {unknown[0][:60]!r}; "
                            f"its tools: {listed}"[:600], f"{where}.allowed_tools")  # fmt: skip
    kept = tuple(tool for tool in server.tools if tool.tool in names or tool.name in names)
    return dataclasses.replace(server, tools=kept)


def mcp_choice(choice: dict[str, Any], mcp: list[McpServer]) -> Any:
    """A ``tool_choice`` of an MCP server's tool as the engine takes it: the name the models
    call it by; a server without a tool named: a call required."""
    server = next((server for server in mcp if server.label == choice.get("server_label")), None)
    if server is None:
        raise ApiError(400, "tool_choice names an MCP server not among the tools", "tool_choice")
    if choice.get("name") is None:
        return "required"
    tool = next((t for t in server.tools if choice.get("name") in (t.tool, t.name)), None)
    if tool is None:
        raise ApiError(400, f"tool_choice: the MCP server {server.label!r} offers no tool "
                            f"{str(choice.get('name'))[:60]!r}", "tool_choice")  # fmt: skip
    return {"type": "function", "function": {"name": tool.name}}
