"""What the servers list, as the tools the models are offered, and what a call returns, as the
text they read. Pure: the MCP SDK's records are read by their fields, nothing runs here.

A tool keeps the name its server gives it where that name is a tool name the engine takes
(``[A-Za-z0-9_-]{1,64}``, ``engine/tools.py``) and no other server lists it; otherwise it is
made one (other characters become ``_``, cut at 64) and prefixed with its server's name when two
servers list the same name."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # the engine's rule for a tool's name (engine/tools.py)
NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64
MAX_TOOLS = 128  # the engine's bound on the tools of one answer (OpenAI's)
MAX_DESCRIPTION = 32_768  # the engine's bound on a tool's description
MAX_RESULT = 20_000  # characters of a result the models read; past it, cut and said so (as --functions)


@dataclass(frozen=True)
class Listed:
    """A tool as its server lists it."""

    server: str
    name: str
    description: str
    schema: Any  # its inputSchema


@dataclass(frozen=True)
class Offered:
    """A tool as the models are offered it: ``name`` (what they call), the server that runs
    it and the name the server knows it by, and the engine's tool spec (OpenAI's shape)."""

    name: str
    server: str
    tool: str
    spec: dict[str, Any]


def offered(listed: Sequence[Listed]) -> tuple[list[Offered], list[str]]:
    """The tools to offer, in the servers' order, and a line for each one left out."""
    notes, usable = [], []
    for tool in listed:
        if not isinstance(tool.schema, dict) or tool.schema.get("type", "object") != "object":
            notes.append(f"the MCP tool {tool.server}/{tool.name} is left out: its inputSchema is not an object's")
        else:
            usable.append(tool)
    base = [_name(tool.name) for tool in usable]
    servers_of: dict[str, set[str]] = {}
    for tool, name in zip(usable, base):
        servers_of.setdefault(name, set()).add(tool.server)
    names = [
        _name(f"{tool.server}_{tool.name}") if len(servers_of[name]) > 1 else name for tool, name in zip(usable, base)
    ]
    names = _distinct(names)
    tools = [
        Offered(name, tool.server, tool.name, _spec(name, tool.description, tool.schema))
        for tool, name in zip(usable, names)
    ]
    if len(tools) > MAX_TOOLS:
        left = tools[MAX_TOOLS:]
        notes.append(
            f"{len(left)} MCP tools past the first {MAX_TOOLS} are left out ({', '.join(t.name for t in left)})"[:300]
        )
        tools = tools[:MAX_TOOLS]
    return tools, notes


def _name(name: str) -> str:
    """A name as a tool name the engine takes: other characters as ``_``, at most 64."""
    made = NOT_IN_A_NAME.sub("_", name)[:MAX_NAME]
    return made or "tool"


def _distinct(names: list[str]) -> list[str]:
    """Names made one by the rules above can still meet (``a.b`` and ``a_b``): later ones get
    ``_2``, ``_3``, ... (cut to fit)."""
    counts, seen, out = Counter(names), set(names), []
    taken: set[str] = set()
    for name in names:
        if counts[name] > 1 and name in taken:
            number = 2
            while (candidate := f"{name[: MAX_NAME - len(str(number)) - 1]}_{number}") in seen:
                number += 1
            seen.add(candidate)
            name = candidate
        taken.add(name)
        out.append(name)
    return out


def _spec(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    parameters = schema if "type" in schema else {"type": "object", **schema}
    said = " ".join(description.split())[:MAX_DESCRIPTION]
    return {"type": "function", "function": {"name": name, "description": said, "parameters": parameters}}


def result_text(result: Any) -> str:
    """A ``CallToolResult`` as the models read it: its text content joined (other content said
    as ``[an image]`` ...; structured content as JSON when there is no other), ``error: ...``
    when the server says the call failed; cut past ``MAX_RESULT`` characters."""
    parts = [_content_text(block) for block in getattr(result, "content", None) or []]
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts = [json.dumps(structured, ensure_ascii=False, default=str)]
    text = "\n".join(parts) or "(no content)"
    if getattr(result, "is_error", False):
        text = f"error: {text}"
    text = text.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate is not text a prompt can hold
    return text if len(text) <= MAX_RESULT else f"{text[:MAX_RESULT]} [cut at {MAX_RESULT:,} characters]"


def _content_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        mime = getattr(block, "mime_type", None)
        what = "an image" if kind == "image" else "an audio clip"
        return f"[{what}{f', {mime}' if mime else ''}]"
    if kind == "resource_link":
        return f"[a link to {getattr(block, 'uri', '')}]"
    if kind == "resource":
        resource = getattr(block, "resource", None)
        text = getattr(resource, "text", None)
        return text if isinstance(text, str) else f"[a resource: {getattr(resource, 'uri', '')}]"
    return f"[{kind} content]"
