"""Every conversation any front end had, in the user's database (``database.py``).

A chat (``Chat``) is a list of turns (``Turn``): the user's messages and the ensemble's answers,
each answer with its rounds (the engine's ``RoundEvent`` records) and its ``FinalEvent``. The
chat app, ``specem run`` and the local server all write here, so ``specem history`` and the
chat app's history see everything.

Nothing is lost: every message is its own transaction, an answer is written while it streams
(``AnswerRecord``: at most ``FLUSH_SECONDS`` behind), and an answer whose process died before
it finished is marked interrupted the next time the history is opened. Two windows on one
chat both keep their turns (messages are appended, never rewritten as a whole file).
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specem_local.errors import SpecemError
from specem_local.events import Event, FinalEvent, RoundEvent
from specem_local.storage.chat_files import chats_dir
from specem_local.storage.chats import INTERRUPTED, Chat, Turn, title_for
from specem_local.storage.database import Busy, CannotWrite, Database
from specem_local.storage.history_rows import (
    final_json,
    import_chat_files,
    insert_message,
    insert_rounds,
    make_shown,
    state_of,
    this_writer,
    turn_from_row,
    writer_alive,
)
from specem_local.storage.search import Match, fts_query, search

FLUSH_SECONDS = 1.0
_CHAT_OF_MESSAGE = "SELECT chat_id FROM messages WHERE id = ?"


@dataclass(frozen=True)
class ChatSummary:
    id: str
    title: str
    origin: str
    created: float
    updated: float
    messages: int


@dataclass(frozen=True)
class UnsureAnswer:
    """An answer the ensemble was unsure of: its chat, how sure, how it begins."""

    chat_id: str
    title: str
    confidence: float
    begins: str
    updated: float


FIRST_LOOK_WAIT = 1.0  # seconds a read waits for a writer before reading without its first look


class History:
    """The chats in the user's database."""

    def __init__(self, path: Path | None = None, chat_files: Path | None = None) -> None:
        """``chat_files``: where version 0.1 saved chats as JSON, imported once (default: there)."""
        self._database = Database(path)
        self.path = self._database.path
        self._chat_files = Path(chat_files) if chat_files else None
        self._looked = False

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._database.transaction("chat history")

    # -- writing ---------------------------------------------------------------------------------
    def add(self, chat: Chat, turn: Turn) -> int:
        """Append a finished turn (a user message, or an answer as it stands) to the chat, which
        is created if it is new; returns the message's id."""
        [message_id] = self._insert(chat, [(turn, state_of(turn))])
        return message_id

    def start_answer(self, chat: Chat, turn: Turn, asked: Sequence[Turn] = ()) -> AnswerRecord:
        """Append the turns ``asked`` (the question, or a request's whole conversation), then
        an answer about to stream, in one transaction; the record writes the answer as it grows."""
        *asked_ids, answer_id = self._insert(chat, [*((t, state_of(t)) for t in asked), (turn, "streaming")])
        return AnswerRecord(self, chat.id, answer_id, turn, asked_ids)

    def start_version(self, chat: Chat, turn: Turn, of: Turn) -> AnswerRecord:
        """Another version of the answer ``of`` (regenerated, continued from a picked candidate,
        a member's answer alone), about to stream, kept as one of ``of``'s alternatives (a front
        end that wants it shown calls ``show_version`` once it has streamed: an answer that fails
        before its first segment is then taken back without touching the others)."""
        if of.message_id is None:
            raise SpecemError("that answer is not in the history; it cannot have other versions")
        with self._transaction() as db:
            turn.message_id = insert_message(db, chat.id, turn, "streaming", this_writer(), time.time(), of.message_id)
        return AnswerRecord(self, chat.id, turn.message_id, turn)

    def mark_edited(self, question: Turn, old: Turn) -> None:
        """``question`` was asked as an edit of the earlier question ``old``: the old question
        and everything after it in the chat (its answer, with its versions) become the new
        question's alternatives (kept, not shown), as do earlier edits of it."""
        if old.message_id is None or question.message_id is None:
            raise SpecemError("that question is not in the history; it cannot be edited")
        with self._transaction() as db:
            db.execute(
                "UPDATE messages SET alternative_of = ? WHERE chat_id = (SELECT chat_id FROM messages WHERE id = ?)"
                " AND ((id >= ? AND id < ? AND alternative_of IS NULL) OR alternative_of = ?)",
                (question.message_id, old.message_id, old.message_id, question.message_id, old.message_id),
            )

    def show_version(self, shown: Turn, version: Turn) -> None:
        """Show ``version`` in place of ``shown`` (which becomes one of its alternatives)."""
        if shown.message_id is None or version.message_id is None:
            raise SpecemError("that answer is not in the history")
        with self._transaction() as db:
            make_shown(db, version.message_id, shown.message_id)

    def start_new_chat(self, origin: str, asked: Sequence[Turn]) -> AnswerRecord:
        """A new chat of ``asked`` (titled from the last of them) and an answer about to stream:
        what a one-shot answer (``specem run``, a server request) records."""
        chat = Chat(title=title_for(asked[-1].content), origin=origin)
        return self.start_answer(chat, Turn("assistant", ""), asked=asked)

    def _insert(self, chat: Chat, turns: list[tuple[Turn, str]]) -> list[int]:
        """Append ``(turn, state)`` pairs to the chat (created if new); their message ids."""
        now = time.time()
        with self._transaction() as db:
            db.execute(
                "INSERT INTO chats VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET updated = excluded.updated, title = excluded.title",
                (chat.id, chat.title, chat.origin, chat.created, now),
            )
            ids = [insert_message(db, chat.id, turn, state, this_writer(), now) for turn, state in turns]
        chat.updated = now
        for (turn, _), message_id in zip(turns, ids):
            turn.message_id = message_id
        return ids

    def update(self, message_id: int, turn: Turn, rounds_saved: int) -> None:
        """Write an answer's text, state and the rounds after the first ``rounds_saved``."""
        with self._transaction() as db:
            state = state_of(turn) if turn.done else "streaming"
            db.execute(
                "UPDATE messages SET content = ?, state = ?, error = ?, final = ?, updated = ? WHERE id = ?",
                (turn.content, state, turn.error, final_json(turn.final), time.time(), message_id),
            )
            insert_rounds(db, message_id, turn.rounds[rounds_saved:], rounds_saved)
            db.execute(f"UPDATE chats SET updated = ? WHERE id = ({_CHAT_OF_MESSAGE})", (time.time(), message_id))

    def remove_messages(self, message_ids: list[int]) -> None:
        """Take messages back (a question whose answer failed before it began returns to the
        input box); a chat left empty goes too."""
        with self._transaction() as db:
            chats = {row[0] for i in message_ids for row in db.execute(_CHAT_OF_MESSAGE, (i,))}
            db.executemany("DELETE FROM messages WHERE id = ?", [(i,) for i in message_ids])
            for chat_id in chats:
                db.execute(
                    "DELETE FROM chats WHERE id = ? AND NOT EXISTS (SELECT 1 FROM messages WHERE chat_id = ?)",
                    (chat_id, chat_id),
                )

    def rename(self, chat_id: str, title: str) -> None:
        with self._transaction() as db:
            db.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def delete(self, chat_id: str) -> bool:
        with self._transaction() as db:
            return db.execute("DELETE FROM chats WHERE id = ?", (chat_id,)).rowcount > 0

    # -- reading ---------------------------------------------------------------------------------
    def chats(self, limit: int | None = None, origin: str | None = None) -> list[ChatSummary]:
        """Chats, most recently updated first."""
        rows = self._read(
            "SELECT c.id, c.title, c.origin, c.created, c.updated, COUNT(m.id) FROM chats c"
            " LEFT JOIN messages m ON m.chat_id = c.id WHERE ? IS NULL OR c.origin = ?"
            " GROUP BY c.id ORDER BY c.updated DESC LIMIT ?",
            (origin, origin, -1 if limit is None else limit),
        )
        return [ChatSummary(*row) for row in rows]

    def load(self, chat_id: str) -> Chat:
        """A chat with every turn; ``SpecemError`` if there is none by that id."""
        with self._reading() as db:
            query = "SELECT id, title, created, updated, origin FROM chats WHERE id = ?"
            row = db.execute(query, (chat_id,)).fetchone()
            rows = db.execute(
                "SELECT id, role, content, state, error, final, format, kind, alternative_of FROM messages"
                " WHERE chat_id = ? ORDER BY id",
                (chat_id,),
            ).fetchall()
            turns = {row[0]: turn_from_row(db, *row[:8]) for row in rows}
        for message_id, *_, alternative_of in rows:
            if alternative_of in turns:
                turns[alternative_of].alternatives.append(turns[message_id])
        shown = [turns[row[0]] for row in rows if row[-1] is None or row[-1] not in turns]
        if row is None:
            raise SpecemError(f"no chat {chat_id!r} in the history; `specem history list` shows the ids")
        return Chat(row[0], row[1], row[2], row[3], shown, row[4])

    def search(self, query: str, limit: int = 20) -> list[Match]:
        """Messages whose text has every word of ``query`` (full-text, any order), best first."""
        fts_query(query)  # an empty search is said before the history is opened
        with self._reading() as db:
            return search(db, query, limit)

    def unsure(self, below: float, limit: int = 20) -> list[UnsureAnswer]:
        """Shown answers whose confidence is below ``below``, least sure first (issue 55); a
        version set aside (regenerated over, or after an edited question) is not listed."""
        rows = self._read(
            "SELECT m.chat_id, c.title, json_extract(m.final, '$.confidence'), m.content, m.updated FROM messages m"
            " JOIN chats c ON c.id = m.chat_id WHERE json_extract(m.final, '$.confidence') < ?"
            " AND m.alternative_of IS NULL"
            " ORDER BY 3, m.updated DESC LIMIT ?",
            (below, limit),
        )
        return [UnsureAnswer(chat, title, float(sure), " ".join(text.split())[:80], updated)
                for chat, title, sure, text, updated in rows]  # fmt: skip

    def keep_response(self, response_id: str, items: list[dict[str, Any]], response: dict[str, Any]) -> None:
        """A response (the Responses API's ``store``): its object, and its conversation as
        items, the response's output last."""
        kept = json.dumps(items, ensure_ascii=False), json.dumps(response, ensure_ascii=False)
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO responses (id, items, created, response) VALUES (?, ?, ?, ?)",
                (response_id, kept[0], time.time(), kept[1]),
            )

    def kept_response(self, response_id: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None] | None:
        """A kept response's items and its object (None for one kept by a version before
        objects were kept); None when none is kept by that id."""
        rows = self._read("SELECT items, response FROM responses WHERE id = ?", (response_id,))
        if not rows:
            return None
        items, response = rows[0]
        return json.loads(items), None if response is None else json.loads(response)

    def forget_response(self, response_id: str) -> bool:
        """Deletes a kept response; False when none was kept by that id."""
        with self._transaction() as db:
            return db.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0

    def segments_won(self) -> dict[str, int]:
        """Per model, the segments it wrote in every answer in the history (every version)."""
        rows = self._read("SELECT json_extract(event, '$.author'), COUNT(*) FROM rounds GROUP BY 1", ())
        return {str(author): count for author, count in rows if author}  # "": text a constraint forced

    def _read(self, query: str, parameters: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._reading() as db:
            return db.execute(query, parameters).fetchall()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A read that takes no write lock, after the first look: its own short write, skipped
        for now when the history cannot be written or another process is writing."""
        if not self._looked:
            try:
                with self._database.transaction("chat history", wait=FIRST_LOOK_WAIT) as db:
                    self._first_look(db)
                self._looked = True
            except (CannotWrite, Busy):
                pass  # read as it is; the next read looks again
        with self._database.reading("chat history") as db:
            yield db

    def _first_look(self, db: sqlite3.Connection) -> None:
        """Once per process, before the first read: import chat files not yet imported, and
        mark interrupted the answers still streaming whose writer has died on this machine."""
        import_chat_files(db, self._chat_files or chats_dir())
        host = socket.gethostname()
        streaming = db.execute("SELECT id, writer, updated FROM messages WHERE state = 'streaming'").fetchall()
        for message_id, writer, updated in streaming:
            if not writer_alive(writer, host, updated):
                db.execute(
                    "UPDATE messages SET state = 'interrupted', error = ? WHERE id = ?", (INTERRUPTED, message_id)
                )


class AnswerRecord:
    """An answer being written to the history as its events arrive: the text and new rounds at
    most ``FLUSH_SECONDS`` behind, and everything at the final event. Writing failures are
    kept in ``error`` (the answer goes on; the front end says so once)."""

    def __init__(
        self, history: History, chat_id: str, message_id: int, turn: Turn, asked_ids: Sequence[int] = ()
    ) -> None:
        self.history = history
        self.chat_id = chat_id
        self.message_id = message_id
        self.asked_ids = list(asked_ids)  # the turns saved with it (to take back with it)
        self.turn = turn
        self.error: str | None = None
        self._saved_rounds = len(turn.rounds)
        self._last_write = time.monotonic()

    def event(self, event: Event) -> None:
        """Add one engine event to the turn; write when a second has passed, or at the end."""
        self.turn.add(event)
        if isinstance(event, FinalEvent) or (
            isinstance(event, RoundEvent) and time.monotonic() - self._last_write >= FLUSH_SECONDS
        ):
            self.flush()

    def fail(self, error: str) -> None:
        """The answer failed after it began: keep the text so far, with the reason."""
        self.turn.error = error
        self.flush()

    def flush(self) -> None:
        if self.error is not None:  # a record that failed once stays stopped (the answer goes on)
            return
        try:
            self.history.update(self.message_id, self.turn, self._saved_rounds)
        except SpecemError as error:
            self.error = str(error)
            return
        self._saved_rounds = len(self.turn.rounds)
        self._last_write = time.monotonic()
