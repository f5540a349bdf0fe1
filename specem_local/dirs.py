"""Where specem-local keeps things: the user's config, the model cache and the data (chats).

Each folder can be moved with an environment variable, which is also how the tests keep away
from a developer's own files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import platformdirs

from specem_local.errors import SpecemError

APP_NAME = "specem-local"
CONFIG_ENV = "SPECEM_CONFIG"  # a models.toml file
CACHE_ENV = "SPECEM_CACHE_DIR"  # assembled demo models
DATA_ENV = "SPECEM_DATA_DIR"  # saved chats
CONFIG_FILENAME = "models.toml"


def user_config_path() -> Path:
    """``models.toml`` in the user config dir (``~/.config/specem-local/`` on Linux)."""
    return Path(platformdirs.user_config_dir(APP_NAME)) / CONFIG_FILENAME


def cache_dir() -> Path:
    """Where assembled demo models live; ``$SPECEM_CACHE_DIR`` overrides it."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir(APP_NAME))


def data_dir() -> Path:
    """Where chats are saved; ``$SPECEM_DATA_DIR`` overrides it."""
    override = os.environ.get(DATA_ENV)
    return Path(override) if override else Path(platformdirs.user_data_dir(APP_NAME))


def replace_file(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path``, a file of ours or one the user named, without harming what
    the path points at. A regular file (or none yet) is replaced in one step: a reader sees the
    old file or the new one, and a failure leaves the old one. A symlink is followed (a dotfiles
    link to models.toml stays a link; its target is written). A device or a pipe (``/dev/null``,
    ``/dev/stdout``, a FIFO) is written in place: replacing it would destroy it. A write that
    fails (a full disk, ``/dev/full``, a folder) is a one-line ``SpecemError``. ``mode``: a
    replaced file's permissions (default: the old file's, else 0644). ``/dev/stdout``,
    ``/dev/stderr`` and ``/dev/fd/N`` are the descriptors this process holds: written there, as
    the shell opened them (``>> notes.md`` appends), never reopened (which would truncate the
    file behind them, or fail on a pipe)."""
    descriptor = open_descriptor(path)
    if descriptor is not None:
        write_descriptor(descriptor, text, path)
        return
    target = Path(os.path.realpath(path))
    try:
        info = target.stat() if os.path.lexists(target) else None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise SpecemError(f"cannot write {path}: it is a folder; give a file name")
        if info is not None and stat.S_ISREG(info.st_mode) and read_only(target, info.st_mode):
            raise SpecemError(f"cannot write {path}: it is read-only; make it writable first (chmod u+w)")
        if info is not None and not stat.S_ISREG(info.st_mode):
            with open(target, "w", encoding="utf-8") as stream:
                stream.write(text)
            return
        if mode is None:
            mode = info.st_mode & 0o777 if info is not None else 0o644
        _replace_regular(target, text, mode)
    except OSError as error:
        raise SpecemError(f"cannot write {path}: {error.strerror or error}") from None


def read_only(path: Path, mode: int) -> bool:
    """Whether a file the user made read-only is to be left alone: no one may write it, or this
    user may not. Root may write any file, so a 0444 file (the user's own "do not touch") is
    refused for root too."""
    return not mode & 0o222 or not os.access(path, os.W_OK)


_DESCRIPTORS = {"/dev/stdout": 1, "/dev/stderr": 2}


def open_descriptor(path: Path | str) -> int | None:
    """The descriptor a path names, if it names one of this process's (``-`` and
    ``/dev/stdout`` are 1, ``/dev/fd/N`` and ``/proc/self/fd/N`` are N), else None."""
    text = str(path)
    if text == "-":
        return 1
    if text in _DESCRIPTORS:
        return _DESCRIPTORS[text]
    for folder in ("/dev/fd/", "/proc/self/fd/"):
        number = text.removeprefix(folder)
        if number != text and number.isdigit() and len(number) < 10:
            return int(number)
    return None


def write_descriptor(descriptor: int, text: str, name: Path | str) -> None:
    """All of ``text`` to an open descriptor (a pipe may take it in parts)."""
    if descriptor == 1:
        sys.stdout.flush()  # what was printed before comes first
    data = text.encode("utf-8")
    try:
        while data:
            data = data[os.write(descriptor, data) :]
    except OSError as error:
        raise SpecemError(f"cannot write {name}: {error.strerror or error}") from None


def _replace_regular(path: Path, text: str, mode: int) -> None:
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


FOLDER = "a folder, not a file"


def not_a_file(path: Path, *, pipes: bool = False) -> str | None:
    """What is at ``path`` when it is not a file we can read, in words ("no such file", "a
    folder", "a named pipe (FIFO)", "a symlink loop", ...); None for a regular file, and with
    ``pipes`` also for a pipe (``--config <(...)``)."""
    try:
        info = os.stat(path)
    except OSError as error:
        if error.errno == errno.ENOENT:
            return "a broken symlink" if os.path.islink(path) else "no such file"
        if error.errno == errno.ELOOP:
            return "a symlink loop"
        if error.errno == errno.ENAMETOOLONG:
            return f"a name too long for this system ({len(str(path))} characters)"
        return f"not readable ({error.strerror or error})"
    mode = info.st_mode
    if stat.S_ISREG(mode) or (pipes and stat.S_ISFIFO(mode)):
        return None
    if stat.S_ISDIR(mode):
        return FOLDER
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO), not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a file"
    return "not a regular file"


def read_text(path: Path, what: str, *, pipes: bool = False) -> str:
    """A UTF-8 text file the user named, or a one-line ``SpecemError`` that says what ``path``
    is instead (``what`` names the role: "tasks file", "--config")."""
    kind = not_a_file(path, pipes=pipes)
    if kind is not None:
        raise SpecemError(f"{what} {path}: {kind}")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SpecemError(f"{what} {path}: cannot read: {error.strerror or error}") from None
    try:
        return data.decode("utf-8-sig")  # a byte-order mark (Notepad's) is not text
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise SpecemError(f"{what} {path}:{line}: not UTF-8 text (byte {error.start}); save it as UTF-8") from None


@contextlib.contextmanager
def file_lock(path: Path, what: str, wait: float) -> Iterator[None]:
    """Held while this process changes ``what``, so that another specem changing it at the same
    time waits (up to ``wait`` seconds) instead of writing over it: an exclusive lock on the
    file ``path`` (made if need be, and left in place), released when the block ends, or by the
    system if the process dies."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as error:
        raise SpecemError(f"cannot open {path}: {error.strerror or error}") from None
    try:
        deadline = time.monotonic() + wait
        while not _locked(descriptor):
            if time.monotonic() >= deadline:
                raise SpecemError(f"another specem is changing {what} (it holds {path}); try again when it is done")
            time.sleep(0.05)
        yield
    finally:
        os.close(descriptor)  # the lock goes with the descriptor


def _locked(descriptor: int) -> bool:
    """Whether this process now holds the lock on ``descriptor`` (never waits)."""
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)  # released when the file is closed
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
