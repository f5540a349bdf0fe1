"""An MCP stdio server written by hand (JSON-RPC lines, no SDK), to misbehave where the SDK's
servers cannot: ``python raw_server.py [no-tools]``. Tools: ``echo`` answers its text;
``coded`` answers with a JSON-RPC error of code -32000 (which the SDK also uses for a closed
connection); ``junk`` writes a line that is not JSON-RPC first; ``latin`` a byte that is not
UTF-8. With ``no-tools`` it says it has no tools capability."""

from __future__ import annotations

import json
import sys

NO_TOOLS = "no-tools" in sys.argv[1:]
ECHO = {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
TOOLS = [ECHO, *({"name": name, "inputSchema": {"type": "object"}} for name in ("coded", "junk", "latin"))]


def send(message: dict) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def answer(request: dict) -> dict:
    method, params = request["method"], request.get("params") or {}
    if method == "initialize":
        capabilities = {} if NO_TOOLS else {"tools": {}}
        return {"protocolVersion": params.get("protocolVersion"), "capabilities": capabilities,
                "serverInfo": {"name": "raw", "version": "1"}}  # fmt: skip
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        name = params["name"]
        if name == "coded":
            raise LookupError("no such file: /x")
        if name == "junk":
            sys.stdout.buffer.write(b"raw server ready, listening on stdio\n")
        if name == "latin":
            sys.stdout.buffer.write(b"\xff\xfe caf\xe9\n")
        text = (params.get("arguments") or {}).get("text", name)
        return {"content": [{"type": "text", "text": text}], "isError": False}
    return {}


for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:  # a notification
        continue
    try:
        send({"jsonrpc": "2.0", "id": request["id"], "result": answer(request)})
    except LookupError as error:
        send({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32000, "message": str(error)}})
