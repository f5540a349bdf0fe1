"""The history's rows read and written as plain functions over a real SQLite connection
(storage/history_rows.py): how a stored message reads back in each state, when a writer counts
as alive, and rounds numbered so that later ones are added, never written over."""

from __future__ import annotations

import dataclasses
import json
import socket
import sqlite3
import time

from specem_local.events import FinalEvent, RoundEvent
from specem_local.storage.chats import GIVEN, INTERRUPTED, Chat, Turn
from specem_local.storage.history import History
from specem_local.storage.history_rows import STALE_SECONDS, state_of, this_writer, turn_from_row, writer_alive
from tests.storage.test_history import answer_events


def rounds_table() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE rounds (message_id INTEGER, number INTEGER, event TEXT)")
    return db


def test_a_turns_state_says_how_its_answer_ended():
    final = FinalEvent("ok", "eos", 1, 1, 1.0, 1.0, {}, 1.0, {}, False)
    assert state_of(Turn("assistant", "ok", final=final)) == "done"
    assert state_of(Turn("assistant", "o", final=dataclasses.replace(final, finish_reason="cancelled"))) == "stopped"
    assert state_of(Turn("assistant", "o", error="the member was lost")) == "failed"
    assert state_of(Turn("assistant", "o", error=INTERRUPTED)) == "interrupted"


def test_a_message_reads_back_as_its_state_says():
    db = rounds_table()
    streaming = turn_from_row(db, 1, "assistant", "par", "streaming", None, None, 1)
    assert streaming.error == "still being written by another window" and streaming.content == "par"
    given = turn_from_row(db, 2, "assistant", "Earlier.", "done", None, None, 1)
    assert given.kind == GIVEN and given.error is None  # sent with a request, not written here
    assert turn_from_row(db, 3, "system", "Be brief.", "done", None, None, 1).kind == GIVEN
    assert turn_from_row(db, 4, "user", "q", "done", None, None, 1).kind == ""
    for state in ("streaming", "interrupted", "failed"):  # an answer begun here, whatever became of it
        assert turn_from_row(db, 5, "assistant", "", state, "why", None, 1).kind == "", state
    db.execute("INSERT INTO rounds VALUES (6, 0, ?)", ("{not json",))
    damaged = turn_from_row(db, 6, "assistant", "kept", "done", None, None, 1, kind="version")
    assert damaged.content == "kept" and damaged.kind == "version" and damaged.message_id == 6
    assert damaged.error is not None and damaged.error.startswith("its records could not be read (")


def test_a_writer_is_alive_while_it_writes_and_its_process_lives_and_dead_once_quiet():
    host, now = socket.gethostname(), time.time()
    assert writer_alive(this_writer(), host, now)  # this process, written just now
    assert not writer_alive(this_writer(), host, now - STALE_SECONDS - 5)  # quiet too long, alive or not
    assert writer_alive(f"{host}x:1", host, now)  # another machine's: cannot be asked
    assert writer_alive("no-colon", host, now)


def test_rounds_written_later_are_added_after_the_first_never_over_them(tmp_path):
    history = History(tmp_path / "specem.db", chat_files=tmp_path / "chats")
    rounds = [e for e in answer_events() if isinstance(e, RoundEvent)]
    assert len(rounds) >= 3
    chat = Chat()
    message_id = history.start_answer(
        chat, Turn("assistant", "so far", rounds=rounds[:2]), [Turn("user", "q")]
    ).message_id
    later = Turn("assistant", "all of it", rounds=rounds)
    history.update(message_id, later, 2)
    with sqlite3.connect(history.path) as db:
        numbers = [row[0] for row in db.execute("SELECT number FROM rounds WHERE message_id = ?", (message_id,))]
        stored = [json.loads(row[0])["text"] for row in db.execute(
            "SELECT event FROM rounds WHERE message_id = ? ORDER BY number", (message_id,))]  # fmt: skip
    assert sorted(numbers) == list(range(len(rounds))) and stored == [r.text for r in rounds]
