"""The ensemble weights learned across answers, in the user's database (``database.py``).

Every read-modify-write is one transaction, so the CLI, the chat app and scripts can learn at
the same time and no update is lost.

Weights are kept per ensemble: the key names its members (``ensemble_key``). A record holds
each member's log-weight now (``log_weights``) and the point it decays back to (``anchor``:
the starting prior, or a calibration), and counts the answers and labelled items behind it.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from specem_local.database import Database
from specem_local.errors import SpecemError


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

    def ensemble_keys(self) -> list[str]:
        """Every ensemble with a record, the latest updated first."""
        with self._transaction() as db:
            return [row[0] for row in db.execute("SELECT key FROM weights ORDER BY updated DESC")]

    def all(self) -> tuple[list[StoredWeights], list[str]]:
        """Every record that reads back whole, and the keys of those that do not."""
        records, damaged = [], []
        for key in self.ensemble_keys():
            try:
                record = self.get(key)
            except SpecemError:
                damaged.append(key)
                continue
            if record is not None:
                records.append(record)
        return records, damaged

    def update(self, key: str, change: Callable[[StoredWeights | None], StoredWeights]) -> StoredWeights:
        """Read, change and write one record in a single transaction."""
        with self._transaction() as db:
            record = change(_read(db, key))
            if not _finite(record):
                raise SpecemError(f"weights for {key}: not finite ({record.log_weights}); not kept")
            db.execute(
                "INSERT OR REPLACE INTO weights VALUES (?, ?, ?, ?, ?, ?)",
                (
                    key,
                    json.dumps(record.log_weights, allow_nan=False),
                    json.dumps(record.anchor, allow_nan=False),
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
    try:
        record = StoredWeights(key, json.loads(row[0]), json.loads(row[1]), row[2], row[3], row[4])
        if _finite(record):
            return record
    except (ValueError, TypeError, AttributeError):
        pass
    raise SpecemError(f"weights for {key} are damaged in the database; forget them with: specem weights reset")


def _finite(record: StoredWeights) -> bool:
    """Whether every log-weight and anchor is a finite number (NaN or inf never enter the store:
    a NaN weight would make every later answer's vote NaN)."""
    values = [*record.log_weights.values(), *record.anchor.values()]
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)
