"""Several answers at once on the same loaded models (``parallel`` places), as llama.cpp's server
runs parallel slots over one unified KV memory.

Each place has its own ``Member`` objects over a ``PlaceModel``: a view of the shared model with
its own range of sequence ids, so an answer's KV operations never touch another's. Every decode
goes through ``Batcher``: one batch at a time over all models (two models decoding at once
on the same cores slow each other far more than 2x), and a batch goes when every answer inside a
step is waiting for a decode, so the rows of the answers that wait on the same model (one per
answer while they draft, every answer's candidates while they verify, a new answer's prompt)
go to llama.cpp in one batch, always from the same thread. With one place nothing is wrapped:
the models are used as loaded.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specem_local.backend.protocol import BatchRow, ContextFull, LanguageModel
from specem_local.backend.scoring import RowScores
from specem_local.engine.member import Member

# Seconds a decode waits for the other answers' rows before it goes without them. Four answers
# at once on 2 cores (docs/performance.md#several-answers-at-once): 0 s 0.99x one at a time,
# 0.005 s 1.33x, 0.02 s 1.28x, 0.05 s 1.29-1.45x, 0.1 s 1.28x, 0.2 s 1.31x; through the server
# 0.02 s 1.23x, 0.05 s 1.31x. Since every batch is decoded on one thread, the wait matters little:
# 0.005 s 1.46-1.49x, 0.02 s 1.44-1.52x, 0.05 s 1.40-1.53x, 0.1 s 1.37-1.44x.
MAX_WAIT = 0.05


@dataclass
class Decode:
    """One place's decode waiting for its batch: ``targets`` set for a scoring decode."""

    model: SharedModel
    rows: list[BatchRow]
    targets: list[int] | None = None
    normalise: bool = False
    result: Any = None
    error: BaseException | None = None
    done: bool = False
    since: float = field(default_factory=time.monotonic)
    passed: int = 0  # batches that went without it

    @property
    def key(self) -> tuple[int, bool, bool]:
        """Decodes that can share a batch: the same model, and the same kind of result."""
        return id(self.model), self.targets is not None, self.normalise


class Batcher:
    """Gathers the decodes of answers running at once into shared batches and decodes each on
    one thread (see the module's docstring). ``one_thread`` False decodes a batch on the thread
    that hands it over instead, and ``on_batch(rows, seconds)`` is told of each batch: the two
    seams ``research/decode_thread.py`` measures the decoding thread by."""

    def __init__(self, max_wait: float = MAX_WAIT) -> None:
        self.max_wait = max_wait
        self._state = threading.Condition()
        self._pending: list[Decode] = []
        self._busy = False
        self._idle_since = time.monotonic()  # when the last batch ended
        self.in_step = 0  # threads running an answer's step
        self.batches = 0  # batches decoded, and the decodes they held (for the measurements)
        self.decodes = 0
        # llama.cpp's CPU backend decodes on an OpenMP team that belongs to the calling thread;
        # the teams of threads that take turns sleep between their decodes and are woken for
        # each (four answers' threads on 2 cores: a 4-row decode 66-72 ms against 56 ms from one
        # thread, 118k context switches against 4.6k). So every batch is decoded on this one.
        self._decoder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specem-decode")
        self.one_thread = True
        self.on_batch: Callable[[int, float], None] | None = None

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """An answer's step runs: its decodes may wait for the other steps' decodes."""
        with self._state:
            self.in_step += 1
        try:
            yield
        finally:
            with self._state:
                self.in_step -= 1
                self._state.notify_all()

    def run(self, decode: Decode) -> Any:
        """Wait for ``decode``'s batch to run (this thread may run it, with others'); its result.
        A batch goes when every thread in a step waits for a decode, or when the oldest decode
        has waited ``max_wait`` since the last batch ended."""
        with self._state:
            self._pending.append(decode)
            self._state.notify_all()
            while not decode.done:
                if self._busy:
                    self._state.wait()
                    continue
                oldest = min(d.since for d in self._pending)
                waited = time.monotonic() - max(oldest, self._idle_since)
                if len(self._pending) >= self.in_step or waited >= self.max_wait:
                    self._run_next()
                else:
                    self._state.wait(timeout=self.max_wait - waited)
        if decode.error is not None:
            raise decode.error
        return decode.result

    def _run_next(self) -> None:
        """Run a group of pending decodes that can share a batch (called holding the condition;
        released while llama.cpp decodes): the largest, unless the oldest decode was passed over
        twice already (then its own)."""
        groups: dict[tuple[int, bool, bool], list[Decode]] = {}
        for pending in self._pending:
            groups.setdefault(pending.key, []).append(pending)
        oldest = min(self._pending, key=lambda d: d.since)
        group = groups[oldest.key] if oldest.passed >= 2 else max(groups.values(), key=len)
        for pending in self._pending:
            pending.passed += pending not in group
        for pending in group:
            self._pending.remove(pending)
        self._busy = True
        self._state.release()
        started = time.perf_counter()
        try:
            if not self.one_thread:
                group[0].model.run(group)
            else:
                decoded = self._decoder.submit(group[0].model.run, group)  # never raises
                try:
                    decoded.result()
                except BaseException:  # Ctrl-C: a batch stuck on another machine is given up, and
                    group[0].model.interrupt()  # its decodes get their results (or errors) first
                    concurrent.futures.wait([decoded])
                    raise
            if self.on_batch is not None:
                self.on_batch(sum(len(decode.rows) for decode in group), time.perf_counter() - started)
        finally:
            self._state.acquire()
            self._busy = False
            self._idle_since = time.monotonic()
            self.batches += 1
            self.decodes += len(group)
            for pending in group:
                pending.done = True
            self._state.notify_all()

    def close(self) -> None:
        """End the decoding thread (after the batch it runs, if any)."""
        self._decoder.shutdown(wait=True)


class SharedModel:
    """A loaded model that ``places`` answers use at once, ``per_place`` sequences each."""

    def __init__(self, model: LanguageModel, places: int, batcher: Batcher) -> None:
        self.model = model
        self.places = places
        self.per_place = model.n_seq_max // places
        self.batcher = batcher
        self.lock = threading.Lock()  # llama.cpp's context is used by one thread at a time

    def interrupt(self) -> None:
        """Stop waiting for a batch on another machine (it raises ``StepAbandoned``)."""
        self.model.interrupt()

    def view(self, place: int) -> PlaceModel:
        return PlaceModel(self, place)

    def run(self, group: list[Decode]) -> None:
        """Decode a group in one batch and hand each its part (never raises: each decode gets its
        result or its error). A batch with no room in the KV memory is taken back and each
        decode runs alone, so only the one that does not fit fails."""
        try:
            if len(group) > 1:
                try:
                    self._decode_together(group)
                    return
                except ContextFull:
                    self._take_back(group)
            for decode in group:
                try:
                    self._decode_together([decode])
                except BaseException as error:  # handed to the answer it belongs to
                    decode.error = error
        except BaseException as error:  # taking the batch back failed (the model was lost)
            for decode in group:
                if decode.result is None and decode.error is None:
                    decode.error = error

    def _decode_together(self, group: list[Decode]) -> None:
        rows = [row for decode in group for row in decode.rows]
        try:
            with self.lock:
                if group[0].targets is None:
                    logits = self.model.decode(rows)
                else:
                    targets = [t for decode in group for t in decode.targets or ()]
                    scores = self.model.decode_scores(rows, targets, normalise=group[0].normalise)
        except ContextFull:
            raise
        except BaseException as error:
            for decode in group:
                decode.error = error
            return
        start = 0
        for decode in group:
            wanted = sum(row.wants_logits for row in decode.rows)
            if decode.targets is None:
                decode.result = logits[start : start + wanted]
            else:
                decode.result = _part(scores, start, wanted)
            start += wanted

    def _take_back(self, group: list[Decode]) -> None:
        """Remove the cells a failed batch may have written (its rows are new positions of their
        sequences), so each decode can run again alone."""
        with self.lock:
            for decode in group:
                for seq_id in {row.seq_id for row in decode.rows}:
                    positions = [row.position for row in decode.rows if row.seq_id == seq_id]
                    self.model.seq_remove(seq_id, min(positions), max(positions) + 1)


def _part(scores: RowScores, start: int, count: int) -> RowScores:
    kept = {index - start: row for index, row in scores.kept.items() if start <= index < start + count}
    return RowScores(scores.chosen[start : start + count], scores.normalisers[start : start + count], kept)


class PlaceModel:
    """One place's view of a shared model: sequence ids ``0 .. per_place - 1`` of its own, the
    whole KV memory (places share it: the runner admits an answer only when its cells fit),
    decodes in shared batches with the other places'."""

    def __init__(self, shared: SharedModel, place: int) -> None:
        self.shared = shared
        self.place = place
        self.base = place * shared.per_place
        self.n_seq_max = shared.per_place

    def __getattr__(self, name: str) -> Any:  # the vocabulary, sizes, placement, lost, ...
        return getattr(self.shared.model, name)

    def decode(self, rows: Sequence[BatchRow]) -> np.ndarray:
        moved = [BatchRow(r.token, r.position, r.seq_id + self.base, r.wants_logits) for r in rows]
        return self.shared.batcher.run(Decode(self.shared, moved))

    def decode_scores(self, rows: Sequence[BatchRow], targets: Sequence[int], *, normalise: bool) -> RowScores:
        moved = [BatchRow(r.token, r.position, r.seq_id + self.base, r.wants_logits) for r in rows]
        return self.shared.batcher.run(Decode(self.shared, moved, list(targets), normalise))

    def seq_copy(self, source: int, target: int, start: int = -1, end: int = -1) -> None:
        with self.shared.lock:
            self.shared.model.seq_copy(source + self.base, target + self.base, start, end)

    def seq_remove(self, seq_id: int, start: int = -1, end: int = -1) -> None:
        with self.shared.lock:
            for own in range(self.n_seq_max) if seq_id < 0 else (seq_id,):
                self.shared.model.seq_remove(own + self.base, start, end)

    def seq_keep(self, seq_id: int) -> None:
        """Drop every cell of this place that ``seq_id`` does not use (the others' stay)."""
        with self.shared.lock:
            for own in range(self.n_seq_max):
                if own != seq_id:
                    self.shared.model.seq_remove(own + self.base, -1, -1)

    def clear(self) -> None:
        self.seq_remove(-1)

    def grammar_tokenizer(self) -> Any:
        with self.shared.lock:  # built once, by whichever place asks first
            return self.shared.model.grammar_tokenizer()

    def interrupt(self) -> None:
        """Stop waiting for a step only when no other answer is in one (the step may hold their
        rows too); otherwise the cancelled answer stops at its next check."""
        if self.shared.batcher.in_step <= 1:
            self.shared.model.interrupt()

    def restart(self) -> None:
        with self.shared.lock:
            self.shared.model.restart()

    def close(self) -> None:
        """The runner closes the shared model once, after every place."""


def place_members(members: Sequence[Member], places: int, batcher: Batcher) -> list[list[Member]]:
    """Each place's members over views of the same models (the first place's included)."""
    shared = [SharedModel(member.model, places, batcher) for member in members]
    return [
        [Member(member.spec, model.view(place), member.prompt_format) for member, model in zip(members, shared)]
        for place in range(places)
    ]
