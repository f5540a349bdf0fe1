"""MCP servers for the tests: configs pointing at ``sys.executable`` and ``tools_server.py``
(or at a command that exits at once, or one that never answers), each carrying a marker in its
arguments so a test can find its processes in /proc, and say whether they have all ended."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

SERVER = Path(__file__).with_name("tools_server.py")
EXITS = "import sys; print('no API key given', file=sys.stderr); sys.exit(3)"  # ends before it answers
HANGS = "import time; time.sleep(600)"  # never reads its stdin, never answers


def marker() -> str:
    return f"specem-test-{uuid.uuid4().hex[:12]}"


def tools_server(mark: str = "") -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVER), *([mark] if mark else [])]}


def python(code: str, mark: str = "") -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-c", code, *([mark] if mark else [])]}


def write_config(path: Path, servers: dict[str, Any]) -> str:
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


def processes(mark: str) -> list[int]:
    """The processes whose command line holds ``mark``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # it ended while we looked
            continue
    return found


def gone(pids: list[int]) -> bool:
    """Every one of ``pids`` has ended and been reaped (a zombie still has its /proc entry)."""
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)
