"""Full-text search over the history: FTS5 finds and ranks the messages, and the snippet shown
for each is cut here, around the first matching word, in time linear in the message (FTS5's
own ``snippet()`` took 42 s on one 0.5 MB message)."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from specem_local.errors import SpecemError

CONTEXT = 60  # characters of the message kept before the first match, and twice that after it


@dataclass(frozen=True)
class Match:
    chat_id: str
    title: str
    role: str
    snippet: str  # the matching text, terms marked with [ ]
    updated: float


def fts_query(query: str) -> str:
    """Every word of ``query`` as an FTS5 phrase (any order, all required); quotes escaped, so
    nothing the user types is FTS5 syntax."""
    words = query.replace("\x00", " ").split()  # FTS5 reads a query only up to a NUL
    terms = " ".join('"' + word.replace('"', '""') + '"' for word in words)
    if not terms:
        raise SpecemError("the search is empty; give a word to look for")
    return terms


def search(db: sqlite3.Connection, query: str, limit: int) -> list[Match]:
    """Messages whose text has every word of ``query``, best first (FTS5's rank)."""
    rows = db.execute(
        "SELECT m.chat_id, c.title, m.role, m.content, c.updated"
        " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid JOIN chats c ON c.id = m.chat_id"
        " WHERE messages_fts MATCH ? ORDER BY rank LIMIT ?",
        (fts_query(query), limit),
    ).fetchall()
    return [Match(chat, title, role, snippet(content, query), updated) for chat, title, role, content, updated in rows]


def snippet(text: str, query: str) -> str:
    """The part of ``text`` around the first word of ``query`` it holds, the words marked with
    ``[ ]`` and cuts with ``…``; one line. FTS5 matched whole words, case and accents aside:
    this looks for the same words, case aside (a word found only without its accent gives the
    start of the message)."""
    words = sorted({w for w in re.findall(r"\w+", query.lower())}, key=len, reverse=True)
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, words)) + r")(?!\w)", re.IGNORECASE)
    first = pattern.search(text) if words else None
    start = max(0, first.start() - CONTEXT) if first else 0
    end = min(len(text), start + 3 * CONTEXT)
    window = " ".join(text[start:end].split())
    marked = pattern.sub(lambda m: f"[{m.group()}]", window) if words else window
    return ("…" if start > 0 else "") + marked + ("…" if end < len(text) else "")
