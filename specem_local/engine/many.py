"""Many answers from one call (``Ensemble.answers``): up to ``parallel`` of them run at once,
each in a thread of its own on a place of the runner, and each is handed back as it finishes
(or in the order given). One that fails (a bad schema, a prompt too long, a bad item, or a bug
in specem) is handed back with its error; the others go on: one item never ends the others.
Leaving early cancels the answers still running."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from specem_local.engine.answer_stream import AnswerStream
from specem_local.engine.ask import Ask, ask_from
from specem_local.engine.request import AnswerRequest
from specem_local.errors import SettingError
from specem_local.events import FinalEvent


@dataclass(frozen=True)
class Answered:
    """One of many answers: its index among the items given, its final record, or the error
    that ended it (a ``SpecemError``: say it and go on; anything else is a bug in specem,
    handed back all the same so that the other answers are not lost)."""

    index: int
    final: FinalEvent | None = None
    error: Exception | None = None


Start = Callable[[Any], AnswerStream]  # an item -> its answer's stream (prepared: errors raised here)


def answer_many(
    items: Iterable[Any],
    start: Start,
    parallel: int,
    ordered: bool = False,
    started: Callable[[int, AnswerStream], None] | None = None,
) -> Iterator[Answered]:
    """Run ``start(item).final()`` for each item, ``parallel`` at a time; yield as they end.
    ``started(index, stream)`` is told of each answer before it runs (to record it, say)."""
    results: queue.Queue[Answered | BaseException] = queue.Queue()
    work = iter(enumerate(items))
    taking = threading.Lock()
    streams: dict[int, AnswerStream] = {}
    stopping = threading.Event()

    def worker() -> None:
        while not stopping.is_set():
            with taking:
                try:
                    index, item = next(work)
                except StopIteration:
                    return
                except BaseException as error:  # the items' own iterator failed
                    results.put(error)
                    return
            try:
                stream = start(item)
                streams[index] = stream
                if started is not None:
                    started(index, stream)
                if stopping.is_set():
                    stream.cancel()
                results.put(Answered(index, stream.final()))
            except Exception as error:  # this item's fault (a SpecemError) or a bug: the others go on
                results.put(Answered(index, error=error))
            except BaseException as error:  # Ctrl-C: said where the answers are read
                results.put(error)
                return
            finally:
                streams.pop(index, None)

    threads = [threading.Thread(target=worker, name="specem-many", daemon=True) for _ in range(max(parallel, 1))]
    for thread in threads:
        thread.start()
    waiting: dict[int, Answered] = {}
    next_index = 0
    try:
        while any(thread.is_alive() for thread in threads) or not results.empty():
            try:
                got = results.get(timeout=0.1)
            except queue.Empty:
                continue
            if isinstance(got, BaseException):
                raise got
            if not ordered:
                yield got
                continue
            waiting[got.index] = got
            while next_index in waiting:
                yield waiting.pop(next_index)
                next_index += 1
        yield from (waiting[index] for index in sorted(waiting))
    finally:
        stopping.set()
        for stream in list(streams.values()):
            stream.cancel()
        for thread in threads:
            thread.join()


def start_for(ensemble: Any, options: dict[str, Any]) -> Start:
    """How ``Ensemble.answers`` starts an item: an ``Ask`` or a request from ``prepare`` as it is;
    a dict as ``stream``'s keywords with its ``prompt`` (its own options over ``options``); else
    a prompt with ``options``."""

    def start(item: Any) -> AnswerStream:
        if isinstance(item, (Ask, AnswerRequest)):
            return ensemble.stream(item)
        if isinstance(item, dict):
            if "prompt" not in item:
                raise SettingError('an item given as a dict needs a "prompt"', "prompt")
            own = {key: value for key, value in item.items() if key != "prompt"}
            return ensemble.stream(ask_from(item["prompt"], {**options, **own}))
        return ensemble.stream(ask_from(item, options))

    return start
