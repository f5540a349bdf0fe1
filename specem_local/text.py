"""How values read to a person, in the CLI and the chat app alike: counts, moments, and text
with its control characters made visible."""

from __future__ import annotations

import re
import time


def human_count(count: int | None) -> str:
    """A parameter count as people write it: ``1.54B``, ``630M``; ``-`` when unknown."""
    if count is None:
        return "-"
    return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"


def when(seconds: float) -> str:
    """A moment as the history lists show it: ``2026-11-23 05:04``, local time; ``?`` for a time
    no calendar holds (a damaged record must not stop a list)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))
    except (OverflowError, OSError, ValueError):
        return "?"


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Text as it may reach a terminal: control characters other than newline and tab (escape
    sequences, BEL, carriage return) shown as ``\\x1b`` and so on, so a prompt, a model's echo
    of it or a model name cannot retitle, clear or recolour the user's terminal. JSON output
    and the database keep the text as it is."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
