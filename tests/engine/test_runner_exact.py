"""The runner's scheduler to the letter (the survivors of a mutation run): when to try again after
a 429 and how the pace is learned, the busy message for one place, the cells an idle place
frees, and a waiter that looks again when the answer it waits for was dropped."""

from __future__ import annotations

import gc
import threading

import pytest

from specem_local.engine import runner as runner_module
from specem_local.errors import Busy
from tests.conftest import poll_until
from tests.engine.test_places import echo, ensemble
from tests.engine.test_scheduler import Gate, gated


class Answer:
    """An answer as the runner sees it: it can be cancelled."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def test_retry_after_starts_from_five_seconds_and_learns_the_pace(monkeypatch):
    with ensemble(2) as running:
        runner = running.runner
        assert runner.answer_seconds == 5.0
        waiting = [Answer() for _ in range(3)]
        for answer in waiting:
            runner._queue.append(__import__("weakref").ref(answer))
        assert runner.retry_after() == 10  # 5 s an answer, 4 ahead of the next (3 waiting and it), 2 places
        runner._queue.clear()
        clock = iter([100.0, 110.0])
        monkeypatch.setattr(runner_module.time, "monotonic", lambda: next(clock))
        held = Answer()
        assert runner.begin(held, 10) == 0
        runner.end(held)  # held its place 10 s
        assert runner.answer_seconds == pytest.approx(0.7 * 5.0 + 0.3 * 10.0)
        assert runner.retry_after() == 4  # ceil(6.5 * 1 / 2)


def test_the_busy_message_counts_one_place_in_the_singular():
    gate = Gate()
    with gated(1, gate) as running, gate:
        first, second = running.stream("apple"), running.stream("river")
        running.runner.enqueue(first, limit=1)
        with pytest.raises(Busy, match=r"^busy: 1 answer at once and 0 waiting; try again shortly$"):
            running.runner.enqueue(second, limit=1)
        first.close()


def test_an_idle_places_cells_are_freed_only_when_an_answer_needs_them():
    with ensemble(2) as running:
        runner = running.runner
        assert running.generate("apple").text.startswith("You said")  # place 0 keeps its prompt's cells
        held = [len(m.tokens) for m in runner.places[0]]
        assert min(held) > 0
        capacity = min(m.n_ctx for m in runner.models)
        assert runner._fits(capacity - max(held), [0, 1])  # fits beside them: they are kept
        assert [len(m.tokens) for m in runner.places[0]] == held
        assert runner._fits(capacity - 1, [0, 1])  # fits only without them: freed
        assert all(len(m.tokens) == 0 for m in runner.places[0])


def test_a_waiter_looks_again_when_the_answer_it_waits_for_is_dropped():
    members = [echo("a", 1, n_params=3000), echo("b", 1)]
    from specem_local.engine import Ensemble
    from specem_local.settings import EnsembleSettings

    with Ensemble(members, EnsembleSettings(greedy=True, reasoning_budget=0, max_tokens=20)) as running:
        first = running.stream("apple")
        next(first)  # open on this thread
        done: list[str] = []
        waiter = threading.Thread(target=lambda: done.append(running.generate("river").text))
        waiter.start()
        poll_until(lambda: running.runner.waiting == 1, 10, "the second answer did not wait in line")
        del first
        gc.collect()  # the dropped stream's place is free, and no one says so: the waiter looks again
        waiter.join(10)
        assert not waiter.is_alive() and done[0].startswith("You said river")
