"""The user's database: one SQLite file for everything specem-local keeps (weights, history).

``specem.db`` in the user data dir (``$SPECEM_DATA_DIR`` moves it), user-only permissions,
WAL. The schema's version is ``PRAGMA user_version``; ``MIGRATIONS`` brings an older file up
to date one step at a time, inside the first write transaction that sees it, so two processes
cannot both upgrade. Every unit of work is one ``BEGIN IMMEDIATE`` transaction, reads included
(a history read may first import old chat files): the CLI, the chat app, a server and scripts
can write at the same time and nothing is lost; each waits its turn (up to 30 s). Any SQLite
or file-system failure becomes a one-line ``SpecemError`` naming the file.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specem_local.dirs import data_dir, not_a_file
from specem_local.errors import SpecemError

DATABASE_NAME = "specem.db"


def _create_weights(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TABLE weights ("
        " key TEXT PRIMARY KEY, log_weights TEXT NOT NULL, anchor TEXT NOT NULL,"
        " answers INTEGER NOT NULL, calibrated_items INTEGER NOT NULL, updated REAL NOT NULL)"
    )


HISTORY_SCHEMA = (
    "CREATE TABLE chats (id TEXT PRIMARY KEY, title TEXT NOT NULL, origin TEXT NOT NULL,"
    " created REAL NOT NULL, updated REAL NOT NULL)",
    "CREATE INDEX chats_updated ON chats(updated)",
    "CREATE TABLE messages (id INTEGER PRIMARY KEY,"
    " chat_id TEXT NOT NULL REFERENCES chats(id) ON DELETE CASCADE, role TEXT NOT NULL,"
    " content TEXT NOT NULL, state TEXT NOT NULL, error TEXT, final TEXT, format INTEGER NOT NULL,"
    " writer TEXT, created REAL NOT NULL, updated REAL NOT NULL)",
    "CREATE INDEX messages_chat ON messages(chat_id, id)",
    "CREATE TABLE rounds (message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,"
    " number INTEGER NOT NULL, event TEXT NOT NULL, PRIMARY KEY (message_id, number))",
    "CREATE TABLE imported_files (path TEXT PRIMARY KEY, chat_id TEXT NOT NULL, imported REAL NOT NULL)",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id')",
    "CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN"
    " INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN"
    " INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content); END",
    "CREATE TRIGGER messages_au AFTER UPDATE OF content ON messages BEGIN"
    " INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);"
    " INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END",
)


def _create_history(db: sqlite3.Connection) -> None:
    """Chats, their messages, each answer's rounds (event records), full-text search. One
    statement at a time: ``executescript`` would commit the migration's transaction early."""
    for statement in HISTORY_SCHEMA:
        db.execute(statement)


def _create_preferences(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE preferences (key TEXT PRIMARY KEY, value TEXT NOT NULL)")


def _add_alternatives_and_choices(db: sqlite3.Connection) -> None:
    """Issue 27. Other versions of a message (a regenerated answer, one continued from a picked
    candidate, each member's answer alone, an edited question) point at the one shown
    (``alternative_of``) and say how they came (``kind``); the user's choices are kept as labels
    with the change they made to the weights (so they can be undone); a weights record counts
    the choices in it and says what it started from (``base``). Every existing row stays."""
    for statement in (
        "ALTER TABLE messages ADD COLUMN alternative_of INTEGER REFERENCES messages(id) ON DELETE CASCADE",
        "ALTER TABLE messages ADD COLUMN kind TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX messages_alternatives ON messages(alternative_of)",
        "CREATE TABLE choices (id INTEGER PRIMARY KEY, ensemble TEXT NOT NULL, kind TEXT NOT NULL,"
        " rewards TEXT NOT NULL, change TEXT NOT NULL, message_id INTEGER, created REAL NOT NULL,"
        " undone INTEGER NOT NULL DEFAULT 0)",
        "ALTER TABLE weights ADD COLUMN choices INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE weights ADD COLUMN base TEXT NOT NULL DEFAULT ''",
    ):
        db.execute(statement)


def _add_undoable_resets(db: sqlite3.Connection) -> None:
    """Issue 36. A reset of an ensemble's weights is kept as a choice (``kind`` "reset") with
    what it forgot (``snapshot``: the record and the choices it marked undone), so it can be
    undone like one."""
    db.execute("ALTER TABLE choices ADD COLUMN snapshot TEXT")


def _add_responses(db: sqlite3.Connection) -> None:
    """Issue 57. Each response of the server's Responses API with its conversation as items
    (input and output), so that a later request continues it by ``previous_response_id``."""
    db.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, items TEXT NOT NULL, created REAL NOT NULL)")


def _add_response_objects(db: sqlite3.Connection) -> None:
    """Each kept response's own object too (``GET /v1/responses/{id}``) and how many of its
    items it wrote (the rest were its input: ``input_items``); NULL for those kept before."""
    db.execute("ALTER TABLE responses ADD COLUMN response TEXT")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _create_weights,
    _create_history,
    _create_preferences,
    _add_alternatives_and_choices,
    _add_undoable_resets,
    _add_responses,
    _add_response_objects,
]  # append only


class Database:
    """The SQLite file; ``transaction()`` is the only way in."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else data_dir() / DATABASE_NAME

    @contextmanager
    def transaction(self, what: str = "database", *, wait: float = 30.0) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction on an up-to-date schema; committed when the block
        ends, rolled back if it raises. ``what`` names the data in error messages; ``wait``: how
        long to wait for another writer (then ``Busy``)."""
        with self._finished(self._begin(what, wait), what) as db:
            yield db

    @contextmanager
    def reading(self, what: str = "database") -> Iterator[sqlite3.Connection]:
        """For reads: a file whose schema is current is read in a deferred transaction that takes
        no write lock (WAL: the read neither waits for a writer nor holds one up). An older
        schema is brought up to date first; a database that cannot be written (read-only, or a
        full disk) is still read, as it is."""
        db = self._open_current()
        if db is None:
            try:
                db = self._begin(what)
            except CannotWrite:
                db = self._open_read_only(what)
        with self._finished(db, what, "look up") as connection:
            yield connection

    def _open_current(self) -> sqlite3.Connection | None:
        """The file in a read transaction, if it exists and its schema is this version's; None
        otherwise (a new file, an older schema to migrate, or one SQLite cannot open so)."""
        if not self.path.is_file():
            return None
        try:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except (OSError, sqlite3.Error):
            return None
        try:
            if db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS):
                db.execute("BEGIN")
                return db
        except sqlite3.Error:
            pass
        db.close()
        return None

    def _begin(self, what: str, wait: float = 30.0) -> sqlite3.Connection:
        if os.path.lexists(self.path):
            kind = not_a_file(self.path)
            if kind is not None and kind != "no such file":  # a folder, a device, a broken symlink
                raise SpecemError(f"{self.path}: {kind}; move it away, or set SPECEM_DATA_DIR to another folder")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists()
            db = sqlite3.connect(self.path, timeout=wait, isolation_level=None)
        except (OSError, sqlite3.Error) as error:
            raise _failure(self.path, f"cannot open the {what}", error) from None
        try:
            if new:
                os.chmod(self.path, 0o600)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("BEGIN IMMEDIATE")
            migrate(db, self.path)
            return db
        except BaseException as error:
            _rollback(db)
            db.close()
            if isinstance(error, (sqlite3.Error, OSError)):
                raise _failure(self.path, f"cannot use the {what}", error) from None
            raise

    def _open_read_only(self, what: str) -> sqlite3.Connection:
        """The file opened for reading only: as it is (``mode=ro``), else, where SQLite cannot
        make its shared-memory file next to it, as an unchanging snapshot (``immutable=1``)."""
        uri = f"file:{urllib.parse.quote(str(self.path))}?mode=ro"
        for options in ("", "&immutable=1"):
            try:
                db = sqlite3.connect(uri + options, uri=True, isolation_level=None)
                version = db.execute("PRAGMA user_version").fetchone()[0]
                break
            except sqlite3.Error as error:
                last = error
        else:
            raise _failure(self.path, f"cannot read the {what}", last) from None
        if version != len(MIGRATIONS):
            db.close()
            raise SpecemError(
                f"{self.path}: read-only, and its schema ({version}) is not this version's ({len(MIGRATIONS)}); "
                "make the folder writable so it can be brought up to date"
            )
        return db

    @contextmanager
    def _finished(self, db: sqlite3.Connection, what: str, doing: str = "store") -> Iterator[sqlite3.Connection]:
        """Yield ``db``; commit what it began when the block ends, roll back if it raises.
        ``doing``: what a text that is not valid Unicode could not be (stored, or looked up)."""
        try:
            yield db
            if db.in_transaction:
                db.execute("COMMIT")
        except UnicodeEncodeError as error:  # a lone surrogate in some text: SQLite cannot store it
            _rollback(db)
            raise SpecemError(
                f"{self.path}: cannot {doing} text that is not valid Unicode ({error.reason}); give it as UTF-8"
            ) from None
        except (sqlite3.Error, OSError) as error:
            _rollback(db)
            raise _failure(self.path, f"cannot use the {what}", error) from None
        except BaseException:
            _rollback(db)
            raise
        finally:
            db.close()


class Busy(SpecemError):
    """Another process held the write lock for longer than the caller would wait."""


class CannotWrite(SpecemError):
    """The database cannot be written (a read-only file, folder or disk; a full disk): reads
    can still go on."""


def _failure(path: Path, doing: str, error: Exception) -> SpecemError:
    """One line for a failure, with what to do about it; ``CannotWrite`` for a read-only file."""
    hint = _hint(error, path)
    kind = CannotWrite if hint in (READ_ONLY_HINT, FULL_HINT) else Busy if "locked" in str(error) else SpecemError
    return kind(f"{path}: {doing} ({error}){hint}")


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring the schema up to ``len(MIGRATIONS)``, one step at a time (inside the caller's transaction)."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version < 0:
        raise SpecemError(f"{path}: schema version {version} is not one specem-local writes; move the file away")
    if version > len(MIGRATIONS):
        raise SpecemError(f"{path} was written by a newer specem-local (schema {version}); update specem-local")
    for step in MIGRATIONS[version:]:
        step(db)
    if version < len(MIGRATIONS):
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")


READ_ONLY_HINT = "; make the folder writable, or set SPECEM_DATA_DIR to one that is"
FULL_HINT = "; is the disk full? free some space"


IO_HINT = (
    "; SQLite could not read or write it (was specem.db-wal or -shm deleted or moved while in use? "
    "then its last writes are lost); if it persists, move the file away"
)
LOW_SPACE = 1 << 20  # below this many free bytes, a disk I/O error is most likely a full disk


def _hint(error: Exception, path: Path) -> str:
    """What to do about an error, when its words do not say it. SQLite reports a full disk as
    a "disk I/O error" too, so the disk's free space decides which it was."""
    text = str(error).lower()
    if "disk i/o" in text:
        try:
            full = shutil.disk_usage(path.parent).free < LOW_SPACE
        except OSError:
            full = False
        return FULL_HINT if full else IO_HINT
    if "full" in text or "no space" in text:
        return FULL_HINT
    if "readonly" in text or "read-only" in text or "unable to open" in text or "permission" in text:
        return READ_ONLY_HINT
    if isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError):
        return "; if it is damaged, move it away"
    return ""


def _rollback(db: sqlite3.Connection) -> None:
    try:
        if db.in_transaction:
            db.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # the connection is closed next; SQLite rolls back what was not committed


class Preferences:
    """What a front end remembers between runs (the chat app's settings), as JSON by key."""

    def __init__(self, path: Path | None = None) -> None:
        self._database = Database(path)

    def get(self, key: str) -> Any:
        with self._database.transaction("preferences") as db:
            row = db.execute("SELECT value FROM preferences WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def set(self, key: str, value: Any) -> None:
        with self._database.transaction("preferences") as db:
            db.execute("INSERT OR REPLACE INTO preferences VALUES (?, ?)", (key, json.dumps(value)))
