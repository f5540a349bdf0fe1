"""The user's database: the ensemble weights learned across answers (SQLite, in the data dir).

One file, ``specem.db`` in the user data dir (``$SPECEM_DATA_DIR`` moves it), user-only
permissions, WAL. The schema's version is ``PRAGMA user_version``; ``MIGRATIONS`` brings an
older file up to date one step at a time. Every read-modify-write is one ``BEGIN IMMEDIATE``
transaction, so the CLI, the chat app and scripts can learn at the same time and no update is
lost.

Weights are kept per ensemble: the key names its members (``ensemble_key``). A record holds
each member's log-weight now (``log_weights``) and the point it decays back to (``anchor``:
the starting prior, or a calibration), and counts the answers and labelled items behind it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specem_local.dirs import data_dir
from specem_local.errors import SpecemError

DATABASE_NAME = "specem.db"


@dataclass(frozen=True)
class StoredWeights:
    key: str
    log_weights: dict[str, float]  # member -> learned log-weight (only relative values matter)
    anchor: dict[str, float]  # member -> where the log-weights decay back to
    answers: int  # answers learned from since the anchor was set
    calibrated_items: int  # labelled items behind the anchor (0: the anchor is a prior)
    updated: float  # seconds since the epoch


def _create_weights(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TABLE weights ("
        " key TEXT PRIMARY KEY, log_weights TEXT NOT NULL, anchor TEXT NOT NULL,"
        " answers INTEGER NOT NULL, calibrated_items INTEGER NOT NULL, updated REAL NOT NULL)"
    )


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_create_weights]  # append only


def ensemble_key(members: Sequence[str]) -> str:
    """The key of an ensemble: its members' identities, sorted (the order they are listed in
    does not matter; a different set of members is a different ensemble)."""
    return " + ".join(sorted(members))


class WeightStore:
    """Learned weights in one SQLite file (default: the user data dir)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / DATABASE_NAME

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists()
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except (OSError, sqlite3.Error) as error:
            raise SpecemError(f"{self.path}: cannot open the weights database ({error})") from None
        try:
            if new:
                os.chmod(self.path, 0o600)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("BEGIN IMMEDIATE")
            _migrate(db, self.path)
            yield db
            db.execute("COMMIT")
        except sqlite3.DatabaseError as error:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise SpecemError(
                f"{self.path}: cannot use the weights database ({error}); if it is damaged, move it away"
            ) from None
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def get(self, key: str) -> StoredWeights | None:
        with self._transaction() as db:
            return _read(db, key)

    def all(self) -> list[StoredWeights]:
        with self._transaction() as db:
            keys = [row[0] for row in db.execute("SELECT key FROM weights ORDER BY updated DESC")]
            return [record for key in keys if (record := _read(db, key)) is not None]

    def update(self, key: str, change: Callable[[StoredWeights | None], StoredWeights]) -> StoredWeights:
        """Read, change and write one record in a single transaction."""
        with self._transaction() as db:
            record = change(_read(db, key))
            db.execute(
                "INSERT OR REPLACE INTO weights VALUES (?, ?, ?, ?, ?, ?)",
                (
                    key,
                    json.dumps(record.log_weights),
                    json.dumps(record.anchor),
                    record.answers,
                    record.calibrated_items,
                    record.updated,
                ),
            )
            return record

    def reset(self, key: str) -> bool:
        """Forget an ensemble's weights (its next answer starts from the prior)."""
        with self._transaction() as db:
            return db.execute("DELETE FROM weights WHERE key = ?", (key,)).rowcount > 0


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise SpecemError(f"{path} was written by a newer specem-local (schema {version}); update specem-local")
    for step in MIGRATIONS[version:]:
        step(db)
    if version < len(MIGRATIONS):
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")


def _read(db: sqlite3.Connection, key: str) -> StoredWeights | None:
    row = db.execute(
        "SELECT log_weights, anchor, answers, calibrated_items, updated FROM weights WHERE key = ?", (key,)
    ).fetchone()
    if row is None:
        return None
    return StoredWeights(key, json.loads(row[0]), json.loads(row[1]), row[2], row[3], row[4])
