"""The weights database: migrations, permissions, concurrent learning, bad files."""

from __future__ import annotations

import sqlite3
import stat
import threading

import pytest

from specem_local.errors import SpecemError
from specem_local.storage.database import MIGRATIONS
from specem_local.storage.weights import StoredWeights, WeightStore, ensemble_key


def record(key: str, answers: int = 1) -> StoredWeights:
    return StoredWeights(key, {"a": 0.5, "b": -0.5}, {"a": 0.0, "b": 0.0}, answers, 0, 1.0)


def test_a_new_database_is_user_only_and_at_the_latest_schema(tmp_path):
    store = WeightStore(tmp_path / "data" / "specem.db")
    assert store.get("x") is None
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def test_every_migration_step_from_an_empty_file(tmp_path):
    path = tmp_path / "specem.db"
    sqlite3.connect(path).close()  # schema 0: an empty database
    store = WeightStore(path)
    store.update("k", lambda old: record("k"))
    assert store.get("k") == record("k")


def test_a_newer_or_damaged_database_is_a_one_line_error(tmp_path):
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as db:
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(SpecemError, match="newer specem-local"):
        WeightStore(newer).get("k")
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"this is not a database" * 100)
    with pytest.raises(SpecemError, match="cannot use the weights database"):
        WeightStore(damaged).get("k")


def test_updates_from_two_threads_are_both_kept(tmp_path):
    store = WeightStore(tmp_path / "specem.db")
    store.update("k", lambda old: record("k", 0))

    def add_answers():
        for _ in range(20):
            store.update("k", lambda old: record("k", old.answers + 1))

    threads = [threading.Thread(target=add_answers) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.get("k").answers == 40


def test_reset_and_listing(tmp_path):
    store = WeightStore(tmp_path / "specem.db")
    store.update("one", lambda old: record("one"))
    store.update("two", lambda old: record("two"))
    assert {r.key for r in store.all()[0]} == {"one", "two"}
    assert store.reset("one") and not store.reset("one")
    assert [r.key for r in store.all()[0]] == ["two"]


def test_the_key_does_not_depend_on_the_order_of_the_members():
    assert ensemble_key(["b", "a"]) == ensemble_key(["a", "b"]) != ensemble_key(["a"])
