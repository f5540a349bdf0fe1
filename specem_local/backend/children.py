"""Child processes that end with this one, however it ends, and leave nothing behind.

A member's worker (``remote.py``) and the format compiler (``engine/format_compiler.py``) run
in children of their own. On Linux the kernel kills such a child when its parent dies
(``PR_SET_PDEATHSIG``), even a child stopped with SIGSTOP, whose own watch thread cannot run.
The kernel counts the *thread* that started the child as its parent, so every child is started
from one thread that lives as long as the process (``spawn``). A ``fork()`` copies the process
without that thread: the copy starts a launcher of its own when it first needs one. The files a
worker keeps in ``/dev/shm`` are named by their process; ``remove_stale`` removes those whose
process is gone (a SIGKILL leaves them behind).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1


@functools.cache
def _launcher() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread children are started from (idle between starts, alive until exit)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="specem-children")


def _forget_launcher() -> None:
    """In a forked copy of this process: the launcher's thread was not copied (a start handed to
    it would wait forever), so the next ``spawn`` starts a new one."""
    _launcher.cache_clear()


os.register_at_fork(after_in_child=_forget_launcher)


def spawn(command: list[str], **options: Any) -> subprocess.Popen:
    """``subprocess.Popen(command, **options)`` started from the launcher thread."""
    return _launcher().submit(lambda: subprocess.Popen(command, **options)).result()


def end_with_parent(parent: int) -> None:
    """In a child: end this process when ``parent`` ends. The kernel sends SIGKILL where it can
    (Linux); a thread watches for the parent everywhere else."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the line above took effect
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def folder_prefix() -> str:
    """The name a worker's folder starts with: the process that owns it is in the name."""
    return f"specem-worker-{os.getpid()}-"


def remove_stale(folder: Path) -> list[Path]:
    """Remove the workers' folders in ``folder`` whose process has ended; return them."""
    removed = []
    for path in folder.glob("specem-worker-*"):
        owner = path.name.removeprefix("specem-worker-").split("-")[0]
        if owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
