"""Issue 27 in the history: other versions of an answer (regenerated, continued from a pick, a
member alone), an edited question, which version is shown, and the migration that adds them."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from specem_local.storage.chats import Chat, Turn
from specem_local.storage.database import MIGRATIONS
from specem_local.storage.history import History
from specem_local.storage.weights import WeightStore
from tests.storage.test_history import answer_events


@pytest.fixture
def history(tmp_path):
    return History(tmp_path / "specem.db", chat_files=tmp_path / "chats")


def answered(history: History, chat: Chat, question: str = "Six times seven?") -> tuple[Turn, Turn]:
    asked, answer = Turn("user", question), Turn("assistant", "")
    chat.turns += [asked, answer]
    record = history.start_answer(chat, answer, asked=[asked])
    for event in answer_events():
        record.event(event)
    return asked, answer


def streamed(record, text: str) -> None:
    record.turn.content = text
    record.flush()


def test_a_regenerated_answer_is_shown_and_the_first_kept_as_an_alternative(history):
    chat = Chat()
    _, first = answered(history, chat)
    again = Turn("assistant", "", kind="regenerated")
    streamed(history.start_version(chat, again, first), "Forty-two.")
    assert history.load(chat.id).turns[1].content == first.content  # shown once it has streamed
    history.show_version(first, again)
    alone = Turn("assistant", "", kind="alone: small")
    streamed(history.start_version(chat, alone, again), "Seven.")
    loaded = history.load(chat.id)
    assert [t.role for t in loaded.turns] == ["user", "assistant"]
    shown = loaded.turns[1]
    assert shown.content == "Forty-two." and shown.kind == "regenerated"
    assert [t.content for t in shown.versions()] == [first.content, "Forty-two.", "Seven."]
    assert loaded.messages()[-1]["content"] == "Forty-two."  # the next question follows the shown one
    history.show_version(shown, shown.alternatives[0])  # back to the first
    again_loaded = history.load(chat.id).turns[1]
    assert again_loaded.content == first.content and len(again_loaded.alternatives) == 2


def test_an_edited_question_keeps_the_old_one_and_its_answers(history):
    chat = Chat()
    old_question, old_answer = answered(history, chat, "Six times sevn?")
    question, answer = Turn("user", "Six times seven?"), Turn("assistant", "")
    record = history.start_answer(chat, answer, asked=[question])
    streamed(record, "42")
    history.mark_edited(question, old_question)
    loaded = history.load(chat.id)
    assert [t.content for t in loaded.turns] == ["Six times seven?", "42"]
    assert {t.content for t in loaded.turns[0].alternatives} == {"Six times sevn?", old_answer.content}
    assert history.chats()[0].messages == 4  # every version is kept


def test_the_migration_keeps_every_chat_and_every_weight(tmp_path):
    """A database of the previous schema (3) with a chat and learned weights opens as 4, whole."""
    path = tmp_path / "specem.db"
    with sqlite3.connect(path) as db:
        for step in MIGRATIONS[:3]:
            step(db)
        db.execute("PRAGMA user_version = 3")
        db.execute("INSERT INTO chats VALUES ('c1', 'old chat', 'chat', 1.0, 2.0)")
        for role, content in (("user", "hi"), ("assistant", "hello")):
            db.execute(
                "INSERT INTO messages (chat_id, role, content, state, format, created, updated)"
                " VALUES ('c1', ?, ?, 'done', 2, 1.0, 1.0)",
                (role, content),
            )
        db.execute("INSERT INTO weights VALUES ('a + b', '{\"a\": 0.1}', '{\"a\": 0.0}', 3, 20, 1.0)")
    chat = History(path, chat_files=tmp_path / "none").load("c1")
    assert [(t.role, t.content, t.alternatives) for t in chat.turns] == [("user", "hi", []), ("assistant", "hello", [])]
    record = WeightStore(path).get("a + b")
    assert (record.answers, record.calibrated_items, record.choices, record.base) == (3, 20, 0, "")
    assert History(path, chat_files=tmp_path / "none").search("hello")[0].chat_id == "c1"
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 7


def test_versions_survive_an_export_and_an_import(history, tmp_path):
    from specem_local.storage.chat_files import chat_from_json, chat_markdown, chat_to_json
    from specem_local.storage.history_rows import import_chat_files

    chat = Chat()
    _, first = answered(history, chat)
    again = Turn("assistant", "", kind="regenerated")
    streamed(history.start_version(chat, again, first), "Forty-two.")
    loaded = history.load(chat.id)
    data = chat_to_json(loaded)
    assert data["turns"][1]["alternatives"][0]["kind"] == "regenerated"
    assert "1 other version(s) kept (regenerated)" in chat_markdown(loaded)
    copy = chat_from_json({**data, "id": "copy"})
    folder = tmp_path / "import"
    folder.mkdir()
    (folder / "copy.json").write_text(__import__("json").dumps(chat_to_json(copy)))
    with history._transaction() as db:
        assert import_chat_files(db, folder) == 1
    imported = history.load("copy")
    assert [t.kind for t in imported.turns[1].versions()] == ["", "regenerated"]
    assert imported.turns[1].alternatives[0].content == "Forty-two."


def test_two_windows_browsing_versions_leave_one_answer_shown(tmp_path, history):
    """Issue 36: window A showed one version, window B (with what it loaded before) another: the
    chat then held two answers for one question, and the next question was sent with both."""
    chat = Chat()
    _, first = answered(history, chat)
    versions = [first]
    for text in ("Forty-two.", "Seven."):
        version = Turn("assistant", "", kind="regenerated")
        streamed(history.start_version(chat, version, versions[-1]), text)
        history.show_version(versions[-1], version)
        versions.append(version)
    window_a = History(history.path, chat_files=tmp_path / "chats").load(chat.id)
    window_b = History(history.path, chat_files=tmp_path / "chats").load(chat.id)
    a_shown, b_shown = window_a.turns[1], window_b.turns[1]
    history.show_version(a_shown, a_shown.versions()[0])  # A: back to the first answer
    history.show_version(b_shown, b_shown.versions()[1])  # B, unaware: to the second
    loaded = history.load(chat.id)
    assert [t.role for t in loaded.turns] == ["user", "assistant"]
    assert loaded.turns[1].content == "Forty-two." and len(loaded.turns[1].alternatives) == 2
    assert [m["role"] for m in loaded.messages()] == ["user", "assistant"]


def test_unsure_lists_the_version_of_each_answer_that_is_shown_never_one_set_aside(history):
    def answer_as_sure_as(record, confidence: float) -> None:
        *events, final = answer_events()
        for event in [*events, dataclasses.replace(final, confidence=confidence)]:
            record.event(event)

    chat = Chat()
    asked, first = Turn("user", "Six times seven?"), Turn("assistant", "")
    chat.turns += [asked, first]
    answer_as_sure_as(history.start_answer(chat, first, asked=[asked]), 0.2)
    assert [found.confidence for found in history.unsure(0.5)] == [0.2]
    again = Turn("assistant", "", kind="regenerated")
    answer_as_sure_as(history.start_version(chat, again, first), 0.1)
    assert [found.confidence for found in history.unsure(0.5)] == [0.2]  # streamed, not shown yet
    history.show_version(first, again)
    [found] = history.unsure(0.5)
    assert (found.confidence, found.chat_id, found.title) == (0.1, chat.id, chat.title) and found.updated > 0
    assert found.begins == " ".join(again.content.split())[:80] and " " in found.begins
    edited, answer = Turn("user", "Six times seven, exactly?"), Turn("assistant", "")
    chat.turns += [edited, answer]
    answer_as_sure_as(history.start_answer(chat, answer, asked=[edited]), 0.3)
    history.mark_edited(edited, asked)  # the first question and its answers are set aside
    assert [found.confidence for found in history.unsure(0.5)] == [0.3]
