"""The one scheduler (issues 53, 54): the runner's line is the only place that decides who runs.
First come, first served once something waits for room, as llama.cpp's server defers a task: an
answer that fits only alone starts when the places drain, before answers that came after it;
an answer cancelled in line leaves it at once and never runs; two ``answers()`` calls at once
share the places instead of failing; a full line is ``Busy`` (the server's 429)."""

from __future__ import annotations

import threading
import time

import pytest

from specem_local.engine import Ensemble
from specem_local.errors import Busy
from specem_local.settings import EnsembleSettings
from tests.conftest import poll_until
from tests.engine.test_places import WORDS, echo, ensemble


class Gate:
    """Holds every decode of a model while closed (``on_decode``), so a test decides when an
    answer may go on; it counts the decodes it held."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.held = 0

    def __call__(self, _model, _rows) -> None:
        if not self.open.is_set():
            self.held += 1
            assert self.open.wait(60), "the gate was never opened"

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.open.set()  # a failed test lets its answers end before the ensemble closes


def gated(places: int, gate: Gate, max_tokens: int = 40) -> Ensemble:
    """Two echoing members whose KV memory holds one long answer, or two short ones, at once."""
    members = [echo("a", places, n_params=3000, on_decode=gate), echo("b", places, on_decode=gate)]
    for member in members:
        member.model.n_ctx = 600
    return Ensemble(members, EnsembleSettings(greedy=True, reasoning_budget=0, max_tokens=max_tokens), parallel=places)


def test_an_answer_that_fits_only_alone_starts_before_answers_that_came_after_it():
    gate = Gate()
    with gated(3, gate) as running, gate:
        started: list[str] = []
        original = running.runner.begin

        def begin(answer, cells=0):
            place = original(answer, cells)
            started.append(answer.request.asked[-1].content)
            return place

        running.runner.begin = begin  # type: ignore[method-assign]
        small = running.stream("apple", max_tokens=40)
        big = running.stream("river", max_tokens=500)  # its cells fit only when nothing else runs
        later = running.stream("stone", max_tokens=40)  # fits beside "apple"; came after "river"
        finals: dict[str, object] = {}

        def read(name, stream) -> None:
            finals[name] = stream.final()

        threads = [threading.Thread(target=read, args=(n, s)) for n, s in (("small", small), ("big", big))]
        threads[0].start()
        poll_until(lambda: started == ["apple"], 10, "the small answer did not start")
        threads[1].start()
        poll_until(lambda: running.runner.waiting == 1, 10, "the big answer did not wait in line")
        threads.append(threading.Thread(target=read, args=("later", later)))
        threads[2].start()
        poll_until(lambda: running.runner.waiting == 2, 10, "the later answer did not wait in line")
        assert started == ["apple"]  # "stone" fits beside "apple" but waits behind "river"
        gate.open.set()
        for thread in threads:
            thread.join(60)
            assert not thread.is_alive()
        assert started == ["apple", "river", "stone"]
        assert all(final.text.startswith("You said") for final in finals.values())


def test_an_answer_cancelled_while_it_waits_leaves_the_line_at_once_and_never_runs():
    gate = Gate()
    with gated(1, gate) as running, gate:
        first = running.stream("apple")
        holder = threading.Thread(target=first.final)
        holder.start()
        poll_until(lambda: gate.held, 10, "the first answer did not start")
        waiting = running.stream("river")
        ended: list[object] = []
        reader = threading.Thread(target=lambda: ended.append(waiting.final()))
        reader.start()
        poll_until(lambda: running.runner.waiting == 1, 10, "the second answer did not wait in line")
        decodes = running.members[0].model.decodes
        waiting.cancel()
        reader.join(5)
        assert not reader.is_alive() and running.runner.waiting == 0  # while the first still runs
        [final] = ended
        assert final.finish_reason == "cancelled" and final.rounds == 0 and final.text == ""
        assert running.members[0].model.decodes == decodes and not waiting.began
        gate.open.set()
        holder.join(60)
        assert not holder.is_alive()
        assert running.generate("stone").text.startswith("You said stone")


def test_two_answers_calls_at_once_share_the_places():
    with ensemble(2) as running:
        got: dict[int, list] = {}

        def many(key: int) -> None:
            got[key] = list(running.answers(WORDS[:4] + WORDS[:4]))

        threads = [threading.Thread(target=many, args=(key,)) for key in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
            assert not thread.is_alive()
        answered = got[0] + got[1]
        assert len(answered) == 16 and [a.error for a in answered] == [None] * 16
        assert all(a.final.text.startswith("You said") for a in answered)


def test_a_full_line_is_busy_with_when_to_try_again():
    gate = Gate()
    with gated(2, gate) as running, gate:
        streams = [running.stream(word) for word in WORDS[:4]]
        for stream in streams[:3]:
            running.runner.enqueue(stream, limit=3)
        with pytest.raises(Busy, match="busy: 2 answers at once and 1 waiting") as busy:
            running.runner.enqueue(streams[3], limit=3)
        assert busy.value.status == 429 and busy.value.retry_after >= 1
        gate.open.set()
        for stream in streams[:3]:
            stream.cancel()
            assert stream.final().finish_reason == "cancelled"
        assert running.runner.waiting == 0 and running.runner.running == 0
        running.runner.enqueue(streams[3], limit=3)  # room again
        assert streams[3].final().text.startswith("You said")


def test_an_answer_that_could_only_wait_for_answers_open_on_its_own_thread_is_an_error_not_a_hang():
    gate = Gate()
    gate.open.set()
    with gated(2, gate, max_tokens=40) as running:
        small = running.stream("apple")
        next(small)  # open on this thread
        big = running.stream("river", max_tokens=500)  # a free place, but its cells do not fit beside "apple"
        started = time.monotonic()
        with pytest.raises(Exception, match="do not fit beside the answers open on this thread"):
            next(big)
        assert time.monotonic() - started < 5
        assert small.final().text.startswith("You said apple")
        assert running.generate("river", max_tokens=500).text.startswith("You said river")
