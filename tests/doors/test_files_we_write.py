"""Issue 25's first doors, through the real ``specem`` command on a real SQLite history (no
model): files the user names are written through, never replaced; what reaches the terminal
cannot drive it; counts and limits out of range are usage errors. Checked against 63faf3c:
``-o /dev/full`` said "Exported" and replaced the device node's path with a regular file, a
symlink was replaced, escape sequences reached the terminal, ``-n 99999999999999999999`` was an
OverflowError traceback."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from specem_local.dirs import replace_file
from specem_local.errors import SpecemError
from specem_local.events import FinalEvent
from specem_local.storage.chats import Chat, Turn
from specem_local.storage.history import History
from specem_local.text import printable
from tests.conftest import ROOT

HOSTILE = "\x1b]0;PWNED\x07\x1b[2JRED"


def specem(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specem_local", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=_env(data),
    )


@pytest.fixture
def recorded(tmp_path, monkeypatch) -> tuple[Path, str]:
    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    record = History().start_new_chat("run", [Turn("user", HOSTILE)])
    final = FinalEvent(HOSTILE + " answered", "eos", 1, 3, 0.1, 0.1, {"a": 1}, 1.0, {"a": 1.0}, False)
    record.event(final)
    return tmp_path, record.chat_id


def test_an_export_to_a_full_device_fails_and_leaves_the_device(recorded):
    data, chat_id = recorded
    result = specem(data, "history", "export", chat_id, "-o", "/dev/full")
    assert result.returncode == 1 and "Exported" not in result.stderr
    assert result.stderr.strip() == "specem: error: cannot write /dev/full: No space left on device"
    assert Path("/dev/full").is_char_device()
    ok = specem(data, "history", "export", chat_id, "-o", "/dev/null")
    assert ok.returncode == 0 and Path("/dev/null").is_char_device()


def test_an_export_through_a_symlink_writes_its_target(recorded):
    data, chat_id = recorded
    target = data / "notes" / "chat.md"
    target.parent.mkdir()
    target.write_text("old")
    link = data / "link.md"
    link.symlink_to(target)
    assert specem(data, "history", "export", chat_id, "-o", str(link)).returncode == 0
    assert link.is_symlink() and "answered" in target.read_text()


def test_an_export_to_dev_stdout_appends_where_the_shell_points_it(recorded):
    """Issue 36: ``-o /dev/stdout >> notes.md`` appended to the notes (it replaced them, mode
    0600), and into a pipe it failed; ``-o -`` is standard output too."""
    data, chat_id = recorded
    notes = data / "notes.md"
    notes.write_text("my notes\n")
    notes.chmod(0o644)
    for output in ("/dev/stdout", "-"):
        command = f"{sys.executable} -m specem_local history export {chat_id} -o {output} >> {notes}"
        result = subprocess.run(command, shell=True, capture_output=True, text=True, cwd=ROOT, env=_env(data))
        assert result.returncode == 0, result.stderr
    text = notes.read_text()
    assert text.startswith("my notes\n") and text.count("answered") == 2
    assert notes.stat().st_mode & 0o777 == 0o644
    assert not (ROOT / "-").exists()  # "-" is standard output, never a file of that name
    piped = subprocess.run(
        f"{sys.executable} -m specem_local history export {chat_id} -o /dev/stdout | cat",
        shell=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(data),
    )
    assert piped.returncode == 0 and "answered" in piped.stdout, piped.stderr


def test_the_exported_line_shows_a_hostile_file_name_escaped(recorded):
    data, chat_id = recorded
    name = data / "chat\x1b]0;PWNED\x07.md"
    result = specem(data, "history", "export", chat_id, "-o", str(name))
    assert result.returncode == 0 and "\x1b" not in result.stderr and "\\x1b]0;PWNED" in result.stderr


def _env(data: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "SPECEM_DATA_DIR": str(data), "HOME": str(data)}


def test_replace_file_writes_a_pipe_in_place_and_refuses_a_folder(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    replace_file(fifo, "through the pipe")
    assert os.read(reader, 100) == b"through the pipe" and fifo.is_fifo()
    os.close(reader)
    with pytest.raises(SpecemError, match="it is a folder"):
        replace_file(tmp_path, "x")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(SpecemError, match="cannot write"):
        replace_file(loop, "x")


def test_models_add_edits_the_file_a_symlinked_models_toml_points_at(tmp_path):
    real = tmp_path / "dotfiles" / "models.toml"
    real.parent.mkdir()
    real.write_text('# mine\n[[models]]\nname = "a"\ndemo = "smollm2-135m"\n')
    link = tmp_path / "models.toml"
    link.symlink_to(real)
    result = specem(tmp_path, "models", "add", "b", "demo:gemma-3-270m", "--config", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and 'name = "b"' in real.read_text() and "# mine" in real.read_text()


def test_what_reaches_the_terminal_cannot_drive_it(recorded):
    data, chat_id = recorded
    for args in (("history",), ("history", "show", chat_id), ("history", "search", "PWNED")):
        out = specem(data, *args).stdout
        assert "\x1b" not in out and "\x07" not in out and "PWNED" in out and "\\x1b" in out, args
    raw = specem(data, "history", "show", chat_id, "--json").stdout
    assert "\\u001b]0;PWNED\\u0007" in raw  # JSON keeps the text as it is, escaped by JSON itself


def test_printable_keeps_newlines_tabs_and_unicode():
    assert printable("a\tb\nc é 💥") == "a\tb\nc é 💥"
    assert printable("\x1b[31mred\x9b\r\x7f") == "\\x1b[31mred\\x9b\\x0d\\x7f"


@pytest.mark.parametrize(
    "args",
    [("history", "list", "-n", "99999999999999999999"), ("history", "search", "x", "-n", "-1")],
)
def test_counts_out_of_range_are_usage_errors(tmp_path, args):
    result = specem(tmp_path, *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "is not" in result.stderr


def test_a_chat_time_no_calendar_holds_is_refused_at_import_and_listed_as_unknown(tmp_path):
    """Issue 36: ``"created": 1e308`` in an imported chat made `specem history` a traceback (and
    Ctrl+O crash the app) until the chat was deleted."""
    from specem_local.storage.chat_files import chat_from_json

    with pytest.raises(ValueError, match="before the year 10000"):
        chat_from_json({"id": "x", "created": 1e308, "turns": []})
    data = tmp_path / "data"
    history = History(data / "specem.db", chat_files=tmp_path / "none")
    history.add(chat := Chat(title="from an older import"), Turn("user", "hello"))
    with sqlite3.connect(data / "specem.db") as db:  # as an earlier version could have stored it
        db.execute("UPDATE chats SET created = 1e308, updated = 1e308 WHERE id = ?", (chat.id,))
    listed = specem(data, "history")
    assert listed.returncode == 0 and "from an older import" in listed.stdout and "?" in listed.stdout, listed.stderr
    assert specem(data, "history", "show", chat.id).returncode == 0


def test_a_folder_where_the_database_should_be_is_named_as_such(tmp_path):
    """Issue 36: it got the hint about a deleted specem.db-wal."""
    (tmp_path / "specem.db").mkdir()
    for args in (("history",), ("weights", "list")):
        result = specem(tmp_path, *args)
        assert result.returncode == 1 and "-wal" not in result.stderr, result.stderr
        said = "specem.db: a folder, not a file; move it away, or set SPECEM_DATA_DIR to another folder"
        assert result.stderr.strip().endswith(said)
