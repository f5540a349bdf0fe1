"""The ensemble weights learned across answers, in the user's database (``database.py``).

Every read-modify-write is one transaction, so the CLI, the chat app and scripts can learn at
the same time and no update is lost.

Weights are kept per ensemble: the key names its members (``ensemble_key``). A record holds
each member's log-weight now (``log_weights``) and the point it decays back to (``anchor``:
the starting prior, or a calibration), and counts the answers and labelled items behind it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from specem_local.database import Database


@dataclass(frozen=True)
class StoredWeights:
    key: str
    log_weights: dict[str, float]  # member -> learned log-weight (only relative values matter)
    anchor: dict[str, float]  # member -> where the log-weights decay back to
    answers: int  # answers learned from since the anchor was set
    calibrated_items: int  # labelled items behind the anchor (0: the anchor is a prior)
    updated: float  # seconds since the epoch


def ensemble_key(members: Sequence[str]) -> str:
    """The key of an ensemble: its members' identities, sorted (the order they are listed in
    does not matter; a different set of members is a different ensemble)."""
    return " + ".join(sorted(members))


class WeightStore:
    """Learned weights in one SQLite file (default: the user data dir)."""

    def __init__(self, path: Path | None = None) -> None:
        self._database = Database(path)
        self.path = self._database.path

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._database.transaction("weights database")

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


def _read(db: sqlite3.Connection, key: str) -> StoredWeights | None:
    row = db.execute(
        "SELECT log_weights, anchor, answers, calibrated_items, updated FROM weights WHERE key = ?", (key,)
    ).fetchone()
    if row is None:
        return None
    return StoredWeights(key, json.loads(row[0]), json.loads(row[1]), row[2], row[3], row[4])
