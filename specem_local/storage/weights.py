"""The ensemble weights learned across answers, in the user's database (``database.py``).

Every read-modify-write is one transaction, so the CLI, the chat app and scripts can learn at
the same time and no update is lost.

Weights are kept per ensemble: the key names its members (``ensemble_key``). A record holds
each member's log-weight now (``log_weights``) and the point it decays back to (``anchor``:
the starting prior, or a calibration), and counts the answers and labelled items behind it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from specem_local.errors import SpecemError
from specem_local.storage.database import Database


@dataclass(frozen=True)
class StoredWeights:
    key: str
    log_weights: dict[str, float]  # member -> learned log-weight (only relative values matter)
    anchor: dict[str, float]  # member -> where the log-weights decay back to
    answers: int  # answers learned from since the anchor was set
    calibrated_items: int  # labelled items behind the anchor (0: the anchor is a prior)
    updated: float  # seconds since the epoch
    choices: int = 0  # the user's choices (picks, thumbs, comparisons) applied to the anchor
    base: str = ""  # what the anchor started from before those choices: "built-in", "prior" ("": as the counts say)


@dataclass(frozen=True)
class Choice:
    """One of the user's choices, kept as a label: what it rewarded and the change it made to
    the log-weights (``change``, by member identity: undoing it subtracts exactly that)."""

    id: int
    ensemble: str  # the weights key
    kind: str  # "pick", "thumbs-up", "thumbs-down", "best"
    rewards: dict[str, float]  # member name -> reward in [0, 1]
    change: dict[str, float]
    message_id: int | None
    created: float
    undone: bool


def ensemble_key(members: Sequence[str]) -> str:
    """The key of an ensemble: its members' identities, sorted (the order they are listed in
    does not matter; a different set of members is a different ensemble)."""
    return " + ".join(sorted(members))


class WeightStore:
    """Learned weights in one SQLite file (default: the user data dir)."""

    def __init__(self, path: Path | None = None) -> None:
        self._database = Database(path)
        self.path = self._database.path
        self.writes = 0  # transactions begun in this process: a change since a read is seen by it

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        self.writes += 1  # weights read before this write are stale (an answer prepared earlier)
        return self._database.transaction("weights database")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A read that takes no write lock, and works on a read-only or full disk."""
        with self._database.reading("weights database") as db:
            yield db

    def get(self, key: str) -> StoredWeights | None:
        with self._reading() as db:
            return _read(db, key)

    def ensemble_keys(self) -> list[str]:
        """Every ensemble with a record, the latest updated first."""
        with self._reading() as db:
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
            return _write(db, change(_read(db, key)))

    def choose(
        self,
        key: str,
        change: Callable[[StoredWeights | None], tuple[StoredWeights | None, dict[str, float]]],
        kind: str,
        rewards: dict[str, float],
        message_id: int | None = None,
    ) -> Choice:
        """Apply one of the user's choices and keep it, in one transaction: ``change`` returns
        the new record (None: the weights stay as they are) and the change it made to the
        log-weights."""
        with self._transaction() as db:
            record, delta = change(_read(db, key))
            if record is not None:
                _write(db, record)
            now = time.time()
            cursor = db.execute(
                "INSERT INTO choices (ensemble, kind, rewards, change, message_id, created) VALUES (?, ?, ?, ?, ?, ?)",
                (key, kind, json.dumps(rewards), json.dumps(delta, allow_nan=False), message_id, now),
            )
            return Choice(int(cursor.lastrowid or 0), key, kind, rewards, delta, message_id, now, False)

    def undo_choice(self, key: str) -> Choice | None:
        """Take back the latest choice still in this ensemble's weights: a pick, thumb or
        comparison has its change subtracted from the log-weights and the anchor; a reset brings
        back what it forgot. Choices whose weights were replaced since (by a calibration, or a
        reset still in force) are not in the weights any more: None when nothing is left to undo."""
        with self._transaction() as db:
            record = _read(db, key)
            rows = db.execute(
                f"SELECT {_CHOICE_COLUMNS}, snapshot FROM choices WHERE ensemble = ? AND undone = 0 ORDER BY id DESC",
                (key,),
            ).fetchall()
            for row in rows:
                choice = _choice(row)
                if choice.kind == RESET:
                    if record is not None:  # weights were kept again since: the reset is history
                        continue
                    _mark_undone(db, choice.id)
                    _bring_back(db, json.loads(row[-1] or "{}"))
                    return dataclasses.replace(choice, undone=True)
                if record is None or record.choices < 1:  # replaced since: nothing of it is kept
                    continue
                _mark_undone(db, choice.id)
                if choice.change:
                    _write(db, _without(record, choice.change))
                return dataclasses.replace(choice, undone=True)
            return None

    def choices(self, key: str | None = None) -> list[Choice]:
        """The user's choices (undone ones included, marked), oldest first; one ensemble's or all."""
        with self._reading() as db:
            rows = db.execute(
                f"SELECT {_CHOICE_COLUMNS} FROM choices WHERE ? IS NULL OR ensemble = ? ORDER BY id", (key, key)
            ).fetchall()
        return [_choice(row) for row in rows]

    def reset(self, key: str) -> bool:
        """Forget an ensemble's weights (its next answer starts from the prior, or its built-in
        calibration); the choices in them stay in the history as labels, marked undone. The
        reset is kept as a choice, so ``undo_choice`` brings it all back. Returns whether there
        was anything to forget."""
        with self._transaction() as db:
            record = _read_raw(db, key)
            if record is None:
                return False
            marked = [row[0] for row in db.execute("SELECT id FROM choices WHERE ensemble = ? AND undone = 0", (key,))]
            db.execute("UPDATE choices SET undone = 1 WHERE ensemble = ?", (key,))
            db.execute("DELETE FROM weights WHERE key = ?", (key,))
            snapshot = json.dumps({"record": record, "choices": marked})
            db.execute(
                "INSERT INTO choices (ensemble, kind, rewards, change, created, snapshot) VALUES (?, ?, ?, ?, ?, ?)",
                (key, RESET, "{}", "{}", time.time(), snapshot),
            )
            return True


RESET = "reset"  # a choice kind: the weights were forgotten (undoable)
_CHOICE_COLUMNS = "id, ensemble, kind, rewards, change, message_id, created, undone"


def _choice(row: tuple) -> Choice:
    return Choice(row[0], row[1], row[2], json.loads(row[3]), json.loads(row[4]), row[5], row[6], bool(row[7]))


def _mark_undone(db: sqlite3.Connection, choice_id: int) -> None:
    db.execute("UPDATE choices SET undone = 1 WHERE id = ?", (choice_id,))


def _without(record: StoredWeights, change: dict[str, float]) -> StoredWeights:
    """The record with one choice's change taken back."""

    def back(values: dict[str, float]) -> dict[str, float]:
        return {name: value - change.get(name, 0.0) for name, value in values.items()}

    return dataclasses.replace(
        record,
        log_weights=back(record.log_weights),
        anchor=back(record.anchor),
        choices=record.choices - 1,
        updated=time.time(),
    )


_WEIGHTS_COLUMNS = "key, log_weights, anchor, answers, calibrated_items, updated, choices, base"


def _read_raw(db: sqlite3.Connection, key: str) -> list | None:
    """A weights row as it is stored (a reset keeps it so, damaged or not)."""
    row = db.execute(f"SELECT {_WEIGHTS_COLUMNS} FROM weights WHERE key = ?", (key,)).fetchone()
    return None if row is None else list(row)


def _bring_back(db: sqlite3.Connection, snapshot: dict) -> None:
    """Undo a reset: the row it forgot, and the choices it marked undone."""
    row = snapshot.get("record")
    if isinstance(row, list) and len(row) == 8:
        db.execute(f"INSERT OR REPLACE INTO weights ({_WEIGHTS_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
    ids = [i for i in snapshot.get("choices", []) if isinstance(i, int)]
    db.executemany("UPDATE choices SET undone = 0 WHERE id = ?", [(i,) for i in ids])


def _write(db: sqlite3.Connection, record: StoredWeights) -> StoredWeights:
    if not _finite(record):
        raise SpecemError(f"weights for {record.key}: not finite ({record.log_weights}); not kept")
    db.execute(
        "INSERT OR REPLACE INTO weights VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            record.key,
            json.dumps(record.log_weights, allow_nan=False),
            json.dumps(record.anchor, allow_nan=False),
            record.answers,
            record.calibrated_items,
            record.updated,
            record.choices,
            record.base,
        ),
    )
    return record


def _read(db: sqlite3.Connection, key: str) -> StoredWeights | None:
    row = db.execute(
        "SELECT log_weights, anchor, answers, calibrated_items, updated, choices, base FROM weights WHERE key = ?",
        (key,),
    ).fetchone()
    if row is None:
        return None
    try:
        record = StoredWeights(key, json.loads(row[0]), json.loads(row[1]), row[2], row[3], row[4], row[5], row[6])
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
