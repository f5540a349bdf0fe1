"""The chat history: one SQLite database shared by every front end (issue 17, part 2)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading

import pytest

from specem_local.errors import SpecemError
from specem_local.events import FinalEvent, RoundEvent
from specem_local.storage import history as history_module
from specem_local.storage.chat_files import chat_to_json, export_chat
from specem_local.storage.chats import INTERRUPTED, Chat, Turn
from specem_local.storage.database import MIGRATIONS
from specem_local.storage.history import History
from specem_local.storage.weights import WeightStore
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member


def answer_events():
    """A real event stream from fake models: start, some rounds, final."""
    ensemble = fake_ensemble(
        fake_member("big", "The answer is 42, because six times seven is forty-two."),
        fake_member("small", "Seven, I guess."),
        segment_tokens=6,
    )
    return list(ensemble.stream(QUESTION))


@pytest.fixture
def history(tmp_path):
    return History(tmp_path / "specem.db", chat_files=tmp_path / "chats")


def test_a_streamed_answer_is_saved_as_it_goes_and_whole_at_the_end(history, monkeypatch):
    monkeypatch.setattr(history_module, "FLUSH_SECONDS", 0.0)
    chat = Chat(title="six times seven")
    history.add(chat, Turn("user", QUESTION))
    record = history.start_answer(chat, Turn("assistant", ""))
    events = answer_events()
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    record.event(events[0])
    record.event(rounds[0])
    partial = History(history.path, chat_files=history._chat_files).load(chat.id)
    assert partial.turns[1].content == rounds[0].text and len(partial.turns[1].rounds) == 1
    for event in events[2:]:  # the start and the first round were given above
        record.event(event)
    saved = history.load(chat.id)
    final = events[-1]
    assert isinstance(final, FinalEvent)
    assert [t.role for t in saved.turns] == ["user", "assistant"]
    assert saved.turns[1].content == final.text and saved.turns[1].final == final
    assert saved.turns[1].rounds == rounds and saved.turns[1].error is None
    assert stat.S_IMODE(history.path.stat().st_mode) == 0o600


def test_a_one_shot_answer_gets_a_new_chat_and_a_failed_record_writes_no_more(history, monkeypatch):
    monkeypatch.setattr(history_module, "FLUSH_SECONDS", 0.0)
    record = history.start_new_chat("run", [Turn("user", QUESTION)])
    saved = history.load(record.chat_id)
    assert (saved.origin, saved.title, [t.role for t in saved.turns]) == ("run", QUESTION, ["user", "assistant"])
    history.rename(record.chat_id, "renamed")
    assert history.load(record.chat_id).title == "renamed"
    writes = []
    monkeypatch.setattr(
        history, "update", lambda *args: writes.append(args) or (_ for _ in ()).throw(SpecemError("disk full"))
    )
    events = answer_events()
    for event in events:
        record.event(event)
    assert record.error == "disk full" and len(writes) == 1  # said once, never retried
    assert record.turn.content == events[-1].text  # the turn still follows the answer


def test_two_windows_on_one_chat_both_keep_their_turns(history):
    first = Chat()
    history.add(first, Turn("user", "from window one"))
    second = history.load(first.id)  # the same chat opened in another window
    history.add(second, Turn("user", "from window two"))
    history.add(first, Turn("user", "window one again"))
    assert [t.content for t in history.load(first.id).turns] == [
        "from window one",
        "from window two",
        "window one again",
    ]


def test_an_answer_whose_process_died_is_marked_interrupted_with_its_text_kept(tmp_path):
    script = f"""
import os, signal
from specem_local.storage.chats import Chat, Turn
from specem_local.events import RoundEvent
from specem_local.storage.history import History
from tests.storage.test_history import answer_events
import specem_local.storage.history as h
h.FLUSH_SECONDS = 0.0
history = History({str(tmp_path / "specem.db")!r}, chat_files={str(tmp_path / "none")!r})
chat = Chat(id="killed")
history.add(chat, Turn("user", "question"))
record = history.start_answer(chat, Turn("assistant", ""))
for event in answer_events()[:3]:
    record.event(event)
os.kill(os.getpid(), signal.SIGKILL)
"""
    killed = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd(), capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    chat = History(tmp_path / "specem.db", chat_files=tmp_path / "none").load("killed")
    answer = chat.turns[1]
    assert answer.error == INTERRUPTED and answer.content and len(answer.rounds) == 2
    with sqlite3.connect(tmp_path / "specem.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT state FROM messages WHERE role = 'assistant'").fetchone()[0] == "interrupted"


def test_json_chats_are_imported_once_and_kept(tmp_path):
    chats = tmp_path / "chats"
    chats.mkdir()
    events = answer_events()
    old = Chat(id="old", title="an old chat", turns=[Turn("user", QUESTION), Turn("assistant", events[-1].text)])
    old.turns[1].rounds = [e for e in events if isinstance(e, RoundEvent)]
    old.turns[1].final = events[-1]
    (chats / "old.json").write_text(json.dumps(chat_to_json(old)))
    (chats / "broken.json").write_text("[1, 2]")
    (chats / "null.json").write_text("null")
    for _ in range(2):  # a second process, or a second start: nothing imported twice
        listed = History(tmp_path / "specem.db", chat_files=chats).chats()
        assert [(c.id, c.origin, c.messages) for c in listed] == [("old", "import", 2)]
    imported = History(tmp_path / "specem.db", chat_files=chats).load("old")
    assert imported.turns[1].rounds == old.turns[1].rounds and imported.turns[1].final == events[-1]
    assert sorted(p.name for p in chats.iterdir()) == ["broken.json", "null.json", "old.json"]


def test_search_finds_words_in_any_order_and_takes_any_text(history):
    chat = Chat(title="capitals")
    history.add(chat, Turn("user", "What is the capital of France?"))
    history.add(chat, Turn("assistant", "Paris is the capital of France."))
    found = history.search("france paris")
    assert [(m.chat_id, m.role) for m in found] == [(chat.id, "assistant")]
    assert "[Paris]" in found[0].snippet
    odd_chat = Chat(title="odd")
    history.add(odd_chat, Turn("user", 'an "unbalanced quote, AND OR NOT as words, (x) and a * star'))
    for odd, hits in (('"unbalanced', 1), ("AND OR NOT", 1), ("capital*", 2), ("(x", 1), ("*", 0), ("NEAR(", 0)):
        found = history.search(odd)  # words as they are, never FTS syntax (nor an SQLite error)
        assert len(found) == hits, odd
        assert all(m.chat_id == odd_chat.id for m in found) or odd == "capital*"
    with pytest.raises(SpecemError, match="the search is empty"):
        history.search("   ")


def test_deleting_a_chat_removes_its_messages_rounds_and_search_entries(history, monkeypatch):
    monkeypatch.setattr(history_module, "FLUSH_SECONDS", 0.0)
    chat = Chat()
    history.add(chat, Turn("user", "zebra question"))
    record = history.start_answer(chat, Turn("assistant", ""))
    for event in answer_events():
        record.event(event)
    assert history.delete(chat.id) and not history.delete(chat.id)
    assert history.search("zebra") == [] and history.chats() == []
    with sqlite3.connect(history.path) as db:
        assert db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0] == 0
    with pytest.raises(SpecemError, match="no chat"):
        history.load(chat.id)


def test_a_question_taken_back_leaves_no_empty_chat(history):
    chat = Chat()
    question = history.add(chat, Turn("user", "hello"))
    record = history.start_answer(chat, Turn("assistant", ""))
    history.remove_messages([question, record.message_id])
    assert history.chats() == []


def test_the_migration_from_the_weights_only_schema_keeps_the_weights(tmp_path):
    path = tmp_path / "specem.db"
    with sqlite3.connect(path) as db:
        MIGRATIONS[0](db)
        db.execute("INSERT INTO weights VALUES ('a + b', '{\"a\": 0.1}', '{\"a\": 0.0}', 3, 0, 1.0)")
        db.execute("PRAGMA user_version = 1")
    History(path, chat_files=tmp_path / "none").chats()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 7
    assert WeightStore(path).get("a + b").answers == 3


def test_records_from_a_newer_version_keep_their_text(history):
    chat = Chat()
    history.add(chat, Turn("user", "hi"))
    with sqlite3.connect(history.path) as db:
        db.execute("UPDATE messages SET format = 99")
    [turn] = history.load(chat.id).turns
    assert turn.content == "hi" and "newer specem-local" in turn.error


def test_exports_are_user_only(tmp_path):
    chat = Chat(turns=[Turn("user", "hi")])
    for name, fmt in (("c.md", "markdown"), ("c.json", "json")):
        path = export_chat(chat, tmp_path / name, fmt)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads((tmp_path / "c.json").read_text())["turns"][0]["content"] == "hi"


def test_one_bad_chat_file_does_not_stop_the_others_or_the_history(tmp_path):
    chats = tmp_path / "chats"
    chats.mkdir()
    good = Chat(id="good", turns=[Turn("user", "hello")])
    (chats / "good.json").write_text(json.dumps(chat_to_json(good)))
    (chats / "nan.json").write_text('{"id": "nan", "created": NaN, "turns": []}')
    (chats / "surrogate.json").write_text('{"id": "half", "turns": [{"role": "user", "content": "\\ud83d"}]}')
    history = History(tmp_path / "specem.db", chat_files=chats)
    with pytest.raises(SpecemError, match="no chat 'missing'"):
        history.load("missing")  # the first look is kept even though this read found nothing
    assert [c.id for c in history.chats()] == ["good"]
    assert [c.id for c in History(tmp_path / "specem.db", chat_files=chats).chats()] == ["good"]


def test_an_answer_whose_writer_went_quiet_is_interrupted_even_if_its_pid_is_reused(history):
    chat = Chat()
    history.add(chat, Turn("user", "q"))
    record = history.start_answer(chat, Turn("assistant", "partial"))
    with sqlite3.connect(history.path) as db:  # written by this (live) process 20 minutes ago
        db.execute("UPDATE messages SET updated = updated - 1200 WHERE id = ?", (record.message_id,))
    answer = History(history.path, chat_files=history._chat_files).load(chat.id).turns[-1]
    assert answer.error == INTERRUPTED and answer.content == "partial"


def test_text_sqlite_cannot_store_is_one_line(history):
    with pytest.raises(SpecemError, match="cannot store text that is not valid Unicode"):
        history.add(Chat(), Turn("user", "half an emoji \ud83d"))
    history.add(Chat(), Turn("user", "whole"))  # the next good one is stored


def test_a_search_for_text_that_is_not_valid_unicode_says_it_was_looked_up_not_stored(history):
    history.add(Chat(), Turn("user", "abc"))
    with pytest.raises(SpecemError, match=r"cannot look up text that is not valid Unicode .*; give it as UTF-8$"):
        history.search("ab\udcffc")  # a non-UTF-8 byte on the command line reads as a lone surrogate
    assert [m.chat_id for m in history.search("abc")]  # the next good search still answers


def test_an_export_over_an_older_world_readable_file_is_user_only(tmp_path):
    target = tmp_path / "chat.md"
    target.write_text("old")
    target.chmod(0o644)
    export_chat(Chat(turns=[Turn("user", "hi")]), target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and "hi" in target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat.md"]  # no temporary file left


def test_a_search_of_long_messages_is_linear_and_takes_no_write_lock(tmp_path):
    """Issue 36: FTS5's snippet() made a search of one 0.5 MB message take 42 s, holding the
    write lock (an answer waited 30 s, then started from the prior). The snippet is cut around
    the first match here; a search is a read that neither waits for a writer nor stops one."""
    from specem_local.storage.search import snippet

    history = History(tmp_path / "specem.db", chat_files=tmp_path / "none")
    long_text = "apple river stone " * 60_000 + "the needle at the end"  # about 1 MB
    history.add(chat := Chat(title="long"), Turn("user", long_text))
    assert snippet("Tell me about the capital of France, Paris.", "paris CAPITAL") == (
        "Tell me about the [capital] of France, [Paris]."
    )
    cut = snippet(long_text, "needle")
    assert "[needle]" in cut and cut.startswith("…") and len(cut) < 200
    assert history.chats()  # the first read of a process takes its first look (a short write, waited 1 s at most)
    writer = sqlite3.connect(tmp_path / "specem.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process writing (an answer streaming)
    try:
        found = []
        worker = threading.Thread(target=lambda: found.extend(history.search("apple river")), daemon=True)
        worker.start()
        worker.join(1.0)  # docs/history.md: 0.016 s for a 1 MB message; the old search waited 30 s for the lock
        assert not worker.is_alive(), "the search waited for the writer, or is still cutting its snippet"
        assert [m.chat_id for m in found] == [chat.id] and found[0].snippet.startswith("[apple] [river]")
    finally:
        writer.rollback()
        writer.close()
