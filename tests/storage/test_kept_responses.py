"""The Responses API's kept responses in the real SQLite file: kept with their object, read back,
deleted; a database of the schema before objects were kept opens with its responses still
there to be continued, and says it has no object for them."""

from __future__ import annotations

import sqlite3

from specem_local.storage.database import MIGRATIONS
from specem_local.storage.history import History

ITEMS = [{"id": "msg_1", "type": "message", "role": "user", "content": "Hi"}]
RESPONSE = {"id": "resp_1", "object": "response", "output": [{"id": "msg_2", "type": "message", "role": "assistant"}]}


def test_a_response_is_kept_read_back_and_forgotten(tmp_path):
    history = History(tmp_path / "specem.db", chat_files=tmp_path / "chats")
    assert history.kept_response("resp_1") is None and not history.forget_response("resp_1")
    history.keep_response("resp_1", ITEMS, RESPONSE)
    history.keep_response("resp_2", [], {**RESPONSE, "id": "resp_2"})
    again = History(tmp_path / "specem.db", chat_files=tmp_path / "chats")  # another process: from the file
    assert again.kept_response("resp_1") == (ITEMS, RESPONSE)
    assert again.forget_response("resp_1")
    assert again.kept_response("resp_1") is None and not again.forget_response("resp_1")
    assert again.kept_response("resp_2") == ([], {**RESPONSE, "id": "resp_2"})  # only the one asked is gone


def test_responses_kept_before_objects_were_are_still_continued(tmp_path):
    path = tmp_path / "specem.db"
    before = MIGRATIONS.index(next(step for step in MIGRATIONS if step.__name__ == "_add_response_objects"))
    with sqlite3.connect(path) as db:
        for step in MIGRATIONS[:before]:
            step(db)
        db.execute(f"PRAGMA user_version = {before}")
        db.execute('INSERT INTO responses VALUES (\'resp_old\', \'[{"role": "user", "content": "Hi"}]\', 1.0)')
    history = History(path, chat_files=tmp_path / "chats")
    assert history.kept_response("resp_old") == ([{"role": "user", "content": "Hi"}], None)
    history.keep_response("resp_new", ITEMS, RESPONSE)
    assert history.kept_response("resp_new") == (ITEMS, RESPONSE)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
