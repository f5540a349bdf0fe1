"""A model whose llama.cpp calls run in a worker process of its own (``worker.py``): the way a
member whose layers are on other machines (ggml-rpc) is loaded. ggml-rpc has no timeouts once
connected and aborts the process on a failed call, by design; here a remote machine that stalls
or dies costs the worker, which the watchdog ends, and the member is lost (``MemberLost``), never
the process that answers.

The vocabulary stays here (the file's vocabulary alone, no weights): tokenizing, token bytes
and llguidance's tokenizer never cross to the worker. What crosses: decodes and the KV memory
operations, over a pipe, each with a deadline (``watchdog.StepDeadlines``); logits rows come
back through a memory-mapped file (``worker.RowsFile``), not pickled.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from specem_local.backend import children, worker
from specem_local.backend.protocol import BatchRow, ContextFull, MemberLost, StepAbandoned
from specem_local.backend.scoring import KEEP, RowScores
from specem_local.backend.vocabulary import VocabularyOnly
from specem_local.backend.watchdog import StepDeadlines
from specem_local.errors import SpecemError
from specem_local.models.rpc import probe_all

POLL_SECONDS = 0.05  # how often a wait looks at the deadline, the worker's life and interrupt()
CLOSE_SECONDS = 2.0  # how long a closing worker may take to free its model before it is ended
SHARED_FOLDER = Path("/dev/shm")  # RAM on Linux; elsewhere the temporary folder (page cache)


def workers_supported() -> bool:
    """Worker processes get their end of the pipe by descriptor (POSIX); elsewhere a member on
    other machines runs in this process, as before."""
    return os.name == "posix"


class WorkerModel(VocabularyOnly):
    """``LanguageModel`` with its computing in a worker process. ``timeout``: the seconds a
    load may go without progress, and the deadline of the first steps (``remote_timeout``)."""

    # What the worker says once it has loaded the model (its "ready" facts).
    n_ctx: int
    n_seq_max: int
    n_params: int
    placement: str
    gpu_layers: int

    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int,
        n_seq_max: int,
        n_threads: int,
        n_gpu_layers: int = 0,
        n_batch: int = 512,
        progress: Callable[[float], None] | None = None,
        rpc: Sequence[str] = (),
        timeout: float = 120.0,
    ) -> None:
        super().__init__(path)
        self.rpc = tuple(rpc)
        self.timeout = timeout
        self.lost: str | None = None
        self.n_threads = n_threads
        self._options = {
            "n_ctx": n_ctx,
            "n_seq_max": n_seq_max,
            "n_threads": n_threads,
            "n_gpu_layers": n_gpu_layers,
            "n_batch": n_batch,
            "rpc": self.rpc,
        }
        shared = SHARED_FOLDER if SHARED_FOLDER.is_dir() else Path(tempfile.gettempdir())
        children.remove_stale(shared)  # left by a process that was killed
        self._folder = Path(tempfile.mkdtemp(prefix=children.folder_prefix(), dir=shared))
        self._process: Any = None
        self._pipe: Any = None
        self._answered = True  # the last call sent has its answer (none is in flight)
        self._rows: worker.RowsFile | None = None
        self._files = 0
        try:
            self._start(progress)
        except BaseException:
            self.close()
            raise

    @property
    def where(self) -> str:
        return ", ".join(self.rpc) if self.rpc else "its worker process"

    # -- the worker's life -------------------------------------------------------------------------
    def _start(self, progress: Callable[[float], None] | None) -> None:
        """Start the worker and wait until it has loaded the model: a load that goes
        ``timeout`` seconds without progress is ended, as is one Ctrl-C stops."""
        mine, theirs = socket.socketpair()
        log = self._folder / "worker.log"
        with open(log, "wb") as output:
            self._process = children.spawn(
                [sys.executable, "-c", worker.COMMAND, str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,  # the terminal's Ctrl-C is for this process to handle
            )
        theirs.close()
        self._pipe = Connection(mine.detach())
        self._pipe.send((str(self.path), self._options))
        self._deadlines = StepDeadlines(self.timeout)
        self._number = 0
        self._interrupts = 0
        heard = time.monotonic()
        try:
            while True:
                if self._pipe.poll(POLL_SECONDS):
                    _, kind, value = self._receive()
                    heard = time.monotonic()
                    if kind == "progress" and progress is not None:
                        progress(value)
                    elif kind == "ready":
                        break
                    elif kind == "error":
                        raise SpecemError(value)
                elif self._process.poll() is not None:
                    raise SpecemError(f"loading {self.path.name} on {self.where} failed: {self._death()}")
                elif time.monotonic() - heard > self.timeout:
                    raise SpecemError(
                        f"loading {self.path.name} on {self.where} made no progress for {self.timeout:g} s: the "
                        "RPC server stopped answering (asleep, or the network dropped); remote_timeout in "
                        "models.toml sets how long to wait"
                    )
        except BaseException:
            self._end()
            raise
        for name, fact in value.items():
            setattr(self, name, fact)
        self.lost = None

    def _receive(self) -> tuple[int, worker.Reply, Any]:
        try:
            return self._pipe.recv()
        except (EOFError, OSError):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(1)
            raise SpecemError(self._death()) from None

    def _death(self) -> str:
        """Why the worker ended, in words: its exit or signal, and the last line ggml wrote."""
        code = self._process.poll()
        if code is None:
            how = "its worker stopped answering"
        elif code < 0:
            how = f"its worker was ended by {signal.Signals(-code).name}"
        else:
            how = f"its worker exited with code {code}"
        said = last_words((self._folder / "worker.log").read_text(errors="replace"))
        return f"{how}{f' ({said})' if said else ''}"

    def _end(self) -> None:
        """End the worker now (it may be stuck in a call that never returns)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(5)
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None

    def _lose(self, reason: str) -> MemberLost:
        self.lost = reason
        self._end()
        return MemberLost(reason)

    def restart(self) -> None:
        """Bring a lost model back: probe each server, then load again."""
        if self.lost is None:
            return
        probe_all(self.rpc, "the RPC server {endpoint} cannot take it back")
        self._start(None)

    def interrupt(self) -> None:
        self._interrupts += 1

    def close(self) -> None:
        """Let the worker free its model (it is ended if it cannot, or if a step it was given
        is still unanswered: it may be stuck on a silent server), then the files here."""
        if self._pipe is not None and self._process.poll() is None and self._answered:
            with contextlib.suppress(OSError):
                self._pipe.send((0, "close", ()))
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(CLOSE_SECONDS)
        self._end()
        if self._rows is not None:
            self._rows.close()
            self._rows = None
        shutil.rmtree(self._folder, ignore_errors=True)
        super().close()

    # -- calls ---------------------------------------------------------------------------------------
    def _call(self, name: str, *args: Any, rows: int = 0) -> Any:
        """One call to the worker, waited for until its deadline: a worker that misses it or
        dies is ended and the model is lost; ``interrupt()`` stops the wait."""
        if self.lost is not None:
            raise MemberLost(self.lost)
        self._number += 1
        number, interrupts = self._number, self._interrupts
        deadline = self._deadlines.deadline(rows)
        started = time.monotonic()
        try:
            self._pipe.send((number, name, args))
        except OSError:
            raise self._lose(self._death()) from None
        self._answered = False
        while True:
            if self._pipe.poll(POLL_SECONDS):
                try:
                    got, kind, value = self._receive()
                except SpecemError as error:
                    raise self._lose(str(error)) from None
                if got != number:
                    continue  # the answer to a step an interrupt gave up on
                self._answered = True
                self._deadlines.record(time.monotonic() - started, rows)
                if kind == "ok":
                    return value
                raise ContextFull(value) if kind == "full" else SpecemError(value)
            if self._interrupts != interrupts:
                raise StepAbandoned(f"stopped waiting for {self.path.name} on {self.where}")
            waited = time.monotonic() - started
            if self._process.poll() is not None:
                raise self._lose(self._death())
            if waited > deadline:
                raise self._lose(
                    f"{self.where} stopped answering: no reply in {waited:.1f} s (the deadline of this step, "
                    f"{self._deadlines.steps} steps in)"
                )

    def _block(self, rows: int) -> tuple[str, int]:
        """The rows file, grown (a new one) when ``rows`` rows do not fit."""
        needed = max(rows, 1) * self.n_vocab * 4
        if self._rows is None or self._rows.size < needed:
            size = max(needed, 2 * self._rows.size if self._rows is not None else needed)
            if self._rows is not None:
                self._rows.close()
                self._rows.path.unlink(missing_ok=True)
            self._files += 1
            self._rows = worker.RowsFile(self._folder / f"rows-{self._files}", size, create=True)
        return str(self._rows.path), self._rows.size

    def _copied(self, count: int) -> np.ndarray:
        assert self._rows is not None
        view = self._rows.rows(count, self.n_vocab)
        out = view.copy()
        del view
        return out

    def decode(self, rows: Sequence[BatchRow]) -> np.ndarray:
        wanted = sum(row.wants_logits for row in rows)
        block = self._block(wanted)
        count = self._call("decode", _as_array(rows), block, rows=len(rows))
        return self._copied(count)

    def decode_scores(self, rows: Sequence[BatchRow], targets: Sequence[int], *, normalise: bool) -> RowScores:
        keep = sum(target == KEEP for target in targets)
        block = self._block(keep)
        chosen, normalisers, kept = self._call(
            "decode_scores", _as_array(rows), np.asarray(targets, dtype=np.int64), normalise, block, rows=len(rows)
        )
        whole = self._copied(len(kept))
        return RowScores(chosen, normalisers, {index: whole[k] for k, index in enumerate(kept)})

    def seq_copy(self, source: int, target: int, start: int = -1, end: int = -1) -> None:
        self._call("seq_copy", source, target, start, end)

    def seq_remove(self, seq_id: int, start: int = -1, end: int = -1) -> None:
        self._call("seq_remove", seq_id, start, end)

    def seq_keep(self, seq_id: int) -> None:
        self._call("seq_keep", seq_id)

    def clear(self) -> None:
        self._call("clear")

    def set_threads(self, threads: int) -> None:
        if threads != self.n_threads and self.lost is None:
            self._call("set_threads", threads)
            self.n_threads = threads


def last_words(log: str) -> str:
    """What a dead worker's log says last (ggml's abort message), without the source path that
    starts it, which helps no user: ``ggml.c:1234: GGML_ASSERT(x) failed`` says the assertion."""
    said = next((line.strip() for line in reversed(log.strip().splitlines()) if line.strip()), "")
    return re.sub(r"^\S*\.(?:c|cc|cpp|h):\d+:\s*", "", said)[:200]


def _as_array(rows: Sequence[BatchRow]) -> np.ndarray:
    return np.array([(r.token, r.position, r.seq_id, r.wants_logits) for r in rows], dtype=np.int64).reshape(-1, 4)
