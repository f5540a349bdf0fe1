"""The history's rows (``history.py``): a turn written as a message row with its rounds, and a
row read back as a turn; which version of an answer is shown; who is writing an answer that
streams, and whether it still can be; chat files imported once."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any

from specem_local.events import FinalEvent, RoundEvent, event_from_dict
from specem_local.storage.chat_files import read_chat_file
from specem_local.storage.chats import EVENT_FORMAT, GIVEN, INTERRUPTED, Chat, Turn

STALE_SECONDS = 600  # an answer still "streaming" with no write for this long was interrupted


def state_of(turn: Turn) -> str:
    if turn.error is not None:
        return "interrupted" if turn.error == INTERRUPTED else "failed"
    return "stopped" if turn.stopped else "done"


def final_json(final: FinalEvent | None) -> str | None:
    return None if final is None else json.dumps(final.to_dict(), ensure_ascii=False)


def insert_message(
    db: sqlite3.Connection,
    chat_id: str,
    turn: Turn,
    state: str,
    writer: str | None,
    when: float,
    alternative_of: int | None = None,
) -> int:
    cursor = db.execute(
        "INSERT INTO messages (chat_id, role, content, state, error, final, format, writer, created, updated,"
        " alternative_of, kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            chat_id,
            turn.role,
            turn.content,
            state,
            turn.error,
            final_json(turn.final),
            EVENT_FORMAT,
            writer,
            when,
            when,
            alternative_of,
            turn.kind,
        ),
    )
    message_id = int(cursor.lastrowid or 0)
    insert_rounds(db, message_id, turn.rounds, 0)
    return message_id


def insert_rounds(db: sqlite3.Connection, message_id: int, rounds: list[RoundEvent], first: int) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO rounds VALUES (?, ?, ?)",
        [(message_id, first + i, json.dumps(e.to_dict(), ensure_ascii=False)) for i, e in enumerate(rounds)],
    )


def make_shown(db: sqlite3.Connection, version: int, shown: int) -> None:
    """``version`` becomes the message shown; every other version of it its alternatives. The
    versions are found from the database, not from what the caller last saw: another window may
    have shown another version since, and the chat must still show one answer per question."""
    roots = [
        row[0]
        for message_id in (version, shown)
        for row in db.execute("SELECT COALESCE(alternative_of, id) FROM messages WHERE id = ?", (message_id,))
    ]
    if not roots:  # both deleted by another window
        return
    marks = ", ".join("?" * len(roots))
    db.execute(
        f"UPDATE messages SET alternative_of = ? WHERE id != ? AND (id IN ({marks}) OR alternative_of IN ({marks}))",
        (version, version, *roots, *roots),
    )
    db.execute("UPDATE messages SET alternative_of = NULL WHERE id = ?", (version,))


def turn_from_row(
    db: sqlite3.Connection,
    message_id: int,
    role: str,
    content: str,
    state: str,
    error: str | None,
    final: str | None,
    format_version: int,
    kind: str = "",
) -> Turn:
    """A stored message as a turn. A record this version cannot read keeps the text and says why."""
    if format_version > EVENT_FORMAT:
        return Turn(
            role,
            content,
            error=error or f"recorded by a newer specem-local (format {format_version})",
            kind=kind,
            message_id=message_id,
        )
    try:
        rounds = [
            event_from_dict(json.loads(row[0]))
            for row in db.execute("SELECT event FROM rounds WHERE message_id = ? ORDER BY number", (message_id,))
        ]
        final_event = event_from_dict(json.loads(final)) if final else None
    except ValueError as problem:
        return Turn(
            role, content, error=error or f"its records could not be read ({problem})", kind=kind, message_id=message_id
        )
    if state == "streaming":  # another process is writing it now
        error = error or "still being written by another window"
    if role != "user" and state == "done" and not kind and final_event is None and not rounds:
        kind = GIVEN  # a system or assistant message a client sent with its request: not written here
    return Turn(
        role,
        content,
        [r for r in rounds if isinstance(r, RoundEvent)],
        final_event if isinstance(final_event, FinalEvent) else None,
        error,
        kind,
        message_id=message_id,
    )


def this_writer() -> str:
    """Who writes an answer while it streams: this machine and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def writer_alive(writer: Any, host: str, updated: float) -> bool:
    """Whether the process that streams an answer may still be writing it. A writer flushes at
    least every round, so ten minutes without a write means it died (whatever its process id
    says: ids are reused, and another machine's cannot be asked); sooner, a process of this
    machine that no longer exists."""
    if time.time() - updated > STALE_SECONDS:
        return False
    name, _, pid = str(writer).rpartition(":")
    if name != host or not pid.isdigit() or os.name != "posix":
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def import_chat_files(db: sqlite3.Connection, directory: Path) -> int:
    """Copy each chat file in ``directory`` into the history once (the files stay where they
    are; a file already imported, or a chat id already stored, is skipped; one that cannot be
    read or stored is left out, and tried again another time). Returns how many were imported."""
    imported = 0
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        key = str(path.resolve())
        if db.execute("SELECT 1 FROM imported_files WHERE path = ?", (key,)).fetchone():
            continue
        try:
            chat = read_chat_file(path)
            db.execute("SAVEPOINT import_file")
            try:
                if not db.execute("SELECT 1 FROM chats WHERE id = ?", (chat.id,)).fetchone():
                    store_chat(db, chat)
                    imported += 1
                db.execute("INSERT INTO imported_files VALUES (?, ?, ?)", (key, chat.id, time.time()))
            except (sqlite3.Error, ValueError):  # this file only (text SQLite cannot store, say)
                db.execute("ROLLBACK TO import_file")
                raise
            finally:
                db.execute("RELEASE import_file")
        except (OSError, ValueError, sqlite3.Error):
            continue
    return imported


def store_chat(db: sqlite3.Connection, chat: Chat) -> None:
    """Insert a whole chat (an import): its row, then each turn as a message with its rounds."""
    db.execute(
        "INSERT INTO chats VALUES (?, ?, ?, ?, ?)", (chat.id, chat.title, chat.origin, chat.created, chat.updated)
    )

    def insert(turn: Turn, alternative_of: int | None) -> None:
        message_id = insert_message(db, chat.id, turn, state_of(turn), None, chat.updated, alternative_of)
        for other in turn.alternatives:
            insert(other, message_id)

    for turn in chat.turns:
        insert(turn, None)
