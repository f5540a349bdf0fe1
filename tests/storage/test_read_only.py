"""A history on a read-only disk or folder is still read; writing to it is one line. As root
(CI) the folder is a tmpfs remounted read-only, which root cannot write either; as a user,
a folder without write permission. Checked against 38f6557: ``history list``, ``show`` and
``search`` failed on a read-only data dir, and the old test skipped as root."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from specem_local.engine import Ensemble
from specem_local.errors import SpecemError
from specem_local.settings import EnsembleSettings
from specem_local.storage.chats import Chat, Turn
from specem_local.storage.database import Database
from specem_local.storage.history import History
from tests.doors.test_files_we_write import specem
from tests.engine.conftest import QUESTION
from tests.engine.test_carried_weights import trio


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` (with what is in it) made read-only for this process, root included."""
    if os.geteuid() == 0:
        if shutil.which("mount") is None:
            pytest.fail("running as root without mount: cannot make a folder read-only")
        keep = folder.with_name(folder.name + "-copy")
        shutil.copytree(folder, keep)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], check=True)
        try:
            shutil.copytree(keep, folder, dirs_exist_ok=True)
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
            yield
        finally:
            subprocess.run(["umount", "-l", str(folder)], check=True)
        return
    for path in (*folder.iterdir(), folder):
        path.chmod(0o500 if path.is_dir() else 0o400)
    try:
        yield
    finally:
        for path in (folder, *folder.iterdir()):
            path.chmod(0o700 if path.is_dir() else 0o600)


@pytest.fixture
def kept(tmp_path) -> tuple[Path, str]:
    data = tmp_path / "data"
    history = History(data / "specem.db", chat_files=tmp_path / "no-chat-files")
    chat = Chat()
    history.add(chat, Turn("user", "what is the capital of France"))
    history.add(chat, Turn("assistant", "Paris"))
    return data, chat.id


def test_a_read_only_history_is_read_and_refuses_writes_in_one_line(kept, tmp_path):
    data, chat_id = kept
    with read_only(data):
        with pytest.raises(OSError):
            (data / "probe").write_text("x")  # the folder really cannot be written
        history = History(data / "specem.db", chat_files=tmp_path / "no-chat-files")
        assert [c.id for c in history.chats()] == [chat_id]
        assert [t.content for t in history.load(chat_id).turns] == ["what is the capital of France", "Paris"]
        assert [m.chat_id for m in history.search("capital")] == [chat_id]
        with pytest.raises(SpecemError, match="make the folder writable") as caught:
            history.add(Chat(), Turn("user", "x"))
        assert "\n" not in str(caught.value)
        assert [c.id for c in history.chats()] == [chat_id]  # still readable after the refusal
        for args in (("history",), ("history", "show", chat_id), ("history", "search", "capital")):
            result = specem(data, *args)
            assert result.returncode == 0 and (chat_id in result.stdout or "capital" in result.stdout), (
                args,
                result.stderr,
            )


def test_a_schema_version_we_never_write_is_named(tmp_path):
    path = tmp_path / "specem.db"
    History(path, chat_files=tmp_path / "none").chats()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = -1")
    message = r"schema version -1 is not one specem-local writes; move the file away"
    with pytest.raises(SpecemError, match=message), Database(path).transaction():
        pass


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounts a tiny tmpfs (root; CI is)")
def test_a_full_disk_is_one_line_and_the_next_write_after_room_is_made_lands(tmp_path):
    """A real full disk (a 512 KiB tmpfs filled up), not a monkeypatched error."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)], check=True)
    try:
        history = History(disk / "specem.db", chat_files=tmp_path / "none")
        chat = Chat()
        history.add(chat, Turn("user", "before the disk filled"))
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as filler:
            filler.write(b"\0" * (1 << 20))
        with pytest.raises(SpecemError, match="is the disk full") as caught:
            history.add(chat, Turn("assistant", "x" * 200_000))
        assert "\n" not in str(caught.value)
        assert [t.content for t in history.load(chat.id).turns] == ["before the disk filled"]
        (disk / "filler").unlink()
        history.add(chat, Turn("assistant", "after room was made"))
        assert [t.content for t in history.load(chat.id).turns][-1] == "after room was made"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_a_disk_io_error_on_a_roomy_disk_does_not_blame_a_full_disk(tmp_path):
    """Checked against 38f6557: deleting specem.db-wal under a running answer said "is the disk
    full?" on a disk with gigabytes free. SQLite says "disk I/O error" for both."""
    from specem_local.storage.database import FULL_HINT, IO_HINT, _hint

    error = sqlite3.OperationalError("disk I/O error")
    assert _hint(error, tmp_path / "specem.db") == IO_HINT and "specem.db-wal" in IO_HINT
    assert _hint(sqlite3.OperationalError("database or disk is full"), tmp_path / "specem.db") == FULL_HINT


def calibrated_trio(data: Path, monkeypatch) -> Ensemble:
    """The fake trio with a kept calibration in ``data``, and a built-in one of its own (as the
    demo ensembles ship) that differs from it."""
    from specem_local.engine import learned
    from specem_local.storage.weights import StoredWeights, WeightStore, ensemble_key

    members = list(trio())
    store = WeightStore(data / "specem.db")
    ensemble = Ensemble(members, EnsembleSettings(greedy=True), weight_store=store)
    learned.calibrate(store, members, ensemble.settings, {"big": 2, "mid": 8, "small": 9}, 10)
    key = ensemble_key([learned.member_identity(m) for m in members])
    shipped = {"big": 0.0, "mid": -1.0, "small": -9.0}
    built_in = {key: StoredWeights(key, shipped, shipped, 0, 20, 0)}
    monkeypatch.setattr(learned, "built_in_calibrations", lambda: built_in)
    return ensemble


def test_weights_on_a_read_only_disk_are_read_and_listed(tmp_path, monkeypatch):
    """Issue 36: ``weights list`` and ``weights stats`` only read, yet failed on a read-only or
    full disk (they took the write lock)."""
    data = tmp_path / "data"
    ensemble = calibrated_trio(data, monkeypatch)
    kept = ensemble.weights_origin()
    assert kept == "calibrated on 10 items"
    with read_only(data):
        assert ensemble.weights_origin() == kept and ensemble.warnings == []
        for args in (("weights", "list"), ("weights", "stats")):
            result = specem(data, *args)
            assert result.returncode == 0, (args, result.stderr)
        assert "calibrated on 10 items" in specem(data, "weights", "list").stdout


def test_an_unreadable_weights_file_starts_from_the_built_in_calibration_and_says_so_once(tmp_path, monkeypatch):
    """A newer schema (or any failure to read) started every answer from the size prior, so
    members known to lose drafted again, and the warning was printed twice."""
    data = tmp_path / "data"
    ensemble = calibrated_trio(data, monkeypatch)
    with sqlite3.connect(data / "specem.db") as db:
        db.execute("PRAGMA user_version = 99")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert ensemble.weights_origin() == "the built-in calibration (20 items)"
        start = next(iter(ensemble.stream(QUESTION)))
    assert start.weights_origin == "the built-in calibration (20 items)"
    assert len([w for w in said if "newer specem-local" in str(w.message)]) == 1
    [warning] = ensemble.warnings
    assert "starting from the built-in calibration" in warning


def test_a_read_of_the_weights_does_not_wait_for_a_writer(tmp_path, monkeypatch):
    """A long search or a calibration holding the write lock made an answer wait 30 s, then
    start from the prior ("database is locked")."""
    data = tmp_path / "data"
    ensemble = calibrated_trio(data, monkeypatch)
    writer = sqlite3.connect(data / "specem.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        done = threading.Event()
        origin: list[str] = []
        threading.Thread(target=lambda: (origin.append(ensemble.weights_origin()), done.set()), daemon=True).start()
        assert done.wait(1.0), "the read waited for the writer's lock"
        assert origin == ["calibrated on 10 items"] and ensemble.warnings == []
    finally:
        writer.rollback()
        writer.close()
