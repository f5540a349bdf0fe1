"""The worker process of a member whose layers are on other machines (ggml-rpc): it loads the
model and runs its llama.cpp calls, so that a remote machine that stalls or dies costs this
process (ended by the watchdog, or aborted by ggml), never the one that answers.

It reads ``(id, name, args)`` calls from its end of a pipe and answers ``(id, "ok", result)``,
``(id, "full", message)`` (``ContextFull``) or ``(id, "error", message)``, in order, one at
a time. Logits rows go through a file both map into memory (``RowsFile``; the parent owns it
and names it in each call): a decode writes its wanted rows there, a scoring the rows it keeps
whole.
While loading it sends ``(0, "progress", fraction)``; once loaded ``(0, "ready", facts)``.

It is started as ``python -c COMMAND FD PID`` (not by multiprocessing's spawn,
which would import the user's own script again), its first message the model's path and
options. Its output (ggml's messages, an abort's last words) goes to a log file the parent
reads when it dies; Ctrl-C is the parent's to handle, so it ignores SIGINT.
"""

from __future__ import annotations

import mmap
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

import numpy as np

from specem_local.backend.children import end_with_parent
from specem_local.backend.model import LlamaModel
from specem_local.backend.protocol import BatchRow, ContextFull
from specem_local.errors import SpecemError


def main(connection: Connection, path: str, options: dict[str, Any]) -> None:
    """The worker's whole life: load, then answer calls until the pipe closes or ``close``."""
    try:
        model = LlamaModel(Path(path), progress=lambda done: connection.send((0, "progress", done)), **options)
    except (SpecemError, OSError) as error:
        connection.send((0, "error", str(error)))
        return
    facts = {name: getattr(model, name) for name in ("n_ctx", "n_seq_max", "n_params", "placement", "gpu_layers")}
    connection.send((0, "ready", facts))
    rows = _Rows()

    def decode(batch: np.ndarray, block: tuple[str, int]) -> int:
        out = model.decode([_row(row) for row in batch])
        rows.put(block, out)
        return len(out)

    def decode_scores(batch: np.ndarray, targets: np.ndarray, normalise: bool, block: tuple[str, int]) -> Any:
        scores = model.decode_scores([_row(row) for row in batch], targets.tolist(), normalise=normalise)
        kept = sorted(scores.kept)
        rows.put(block, np.stack([scores.kept[i] for i in kept]) if kept else np.empty((0, model.n_vocab)))
        return scores.chosen, scores.normalisers, kept

    calls: dict[str, Callable[..., Any]] = {
        "decode": decode,
        "decode_scores": decode_scores,
        "seq_copy": model.seq_copy,
        "seq_remove": model.seq_remove,
        "seq_keep": model.seq_keep,
        "clear": model.clear,
        "set_threads": model.set_threads,
    }
    try:
        while True:
            try:
                number, name, args = connection.recv()
            except EOFError:
                return
            if name == "close":
                return
            try:
                connection.send((number, "ok", calls[name](*args)))
            except ContextFull as error:
                connection.send((number, "full", str(error)))
            except SpecemError as error:
                connection.send((number, "error", str(error)))
    finally:
        rows.close()
        model.close()


def _row(values: np.ndarray) -> BatchRow:
    """A batch row as it crossed the pipe: token, position, sequence, whether logits are wanted."""
    token, position, seq_id, wants = map(int, values)
    return BatchRow(token, position, seq_id, bool(wants))


class RowsFile:
    """A file both processes map into memory (on Linux in /dev/shm, so RAM) that carries
    logits rows: the parent creates it, a bigger one when a call needs more room, and names it
    in each call; the worker maps whichever it is given. No pickling, no resource tracker."""

    def __init__(self, path: Path, size: int, *, create: bool = False) -> None:
        if create:
            with open(path, "wb") as file:
                file.truncate(size)
        self.path, self.size = path, size
        self._file = open(path, "r+b")  # noqa: SIM115 (closed in close())
        self._map = mmap.mmap(self._file.fileno(), size)

    def rows(self, count: int, n_vocab: int) -> np.ndarray:
        """A view of the first ``count`` rows (drop it before ``close``)."""
        return np.ndarray((count, n_vocab), dtype=np.float32, buffer=self._map)

    def close(self) -> None:
        self._map.close()
        self._file.close()


class _Rows:
    """The worker's side: the parent's current rows file, mapped again when it changes."""

    def __init__(self) -> None:
        self.file: RowsFile | None = None

    def put(self, block: tuple[str, int], rows: np.ndarray) -> None:
        path, size = Path(block[0]), block[1]
        if self.file is None or self.file.path != path:
            self.close()
            self.file = RowsFile(path, size)
        self.file.rows(*rows.shape)[...] = rows

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


COMMAND = "from specem_local.backend.worker import child; child()"  # python -c COMMAND FD PARENT
Reply = Literal["ok", "full", "error", "progress", "ready"]  # what the worker answers a call with


def child() -> None:
    """The worker process: ``sys.argv`` holds its end of the pipe and its parent's id. Started
    with ``-c``, not ``-m``: the package imports this module first, and runpy would warn so in
    the log whose last line says why a worker died."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent(int(sys.argv[2]))
    pipe = Connection(int(sys.argv[1]))
    main(pipe, *pipe.recv())
