"""The answer stream to the letter (the survivors of a mutation run): an answer cancelled while it
waited for a place, one whose setting up failed, one closed while a step that ends a round runs,
and the async face's word on how each ended (``ended``), from a thread the interpreter need not
wait for."""

from __future__ import annotations

import asyncio
import re
import threading

import pytest

from specem_local.engine import rounds
from specem_local.errors import SpecemError
from specem_local.events import Event, FinalEvent, RoundEvent, StartEvent
from tests.conftest import poll_until
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_lost_members import ANSWER, LoseAt
from tests.engine.test_scheduler import Gate, gated


class Record:
    """What the history is told, kept; ``hold_at``: the write of that event (counted from 1)
    waits until the test releases it."""

    def __init__(self, hold_at: int = 0) -> None:
        self.error: str | None = None
        self.events: list[Event] = []
        self.failures: list[str] = []
        self.hold_at = hold_at
        self.holding, self.release = threading.Event(), threading.Event()

    def event(self, event: Event) -> None:
        self.events.append(event)
        if len(self.events) == self.hold_at:
            self.holding.set()
            assert self.release.wait(10), "the write was never released"

    def fail(self, error: str) -> None:
        self.failures.append(error)


def test_an_answer_cancelled_while_it_waits_for_a_place_ends_at_once_and_is_recorded():
    gate = Gate()
    with gated(1, gate) as running, gate:
        first = running.stream("apple")
        holder = threading.Thread(target=lambda: list(first))  # reads on, held at the gate
        holder.start()
        poll_until(lambda: gate.held > 0, 10, "the first answer never reached its prompt")
        record = Record()
        second = running.stream("river").log_to(record)
        got: list[Event] = []
        waiter = threading.Thread(target=lambda: got.append(next(second)))
        waiter.start()
        second.cancel()
        waiter.join(10)
        assert not waiter.is_alive()
        [final] = got
        assert isinstance(final, FinalEvent) and final.finish_reason == "cancelled" and final.rounds == 0
        assert isinstance(final.seconds, float) and 0 <= final.seconds < 10  # the time it waited
        assert record.events == [final] and not second.began
        gate.open.set()
        holder.join(10)
        assert not holder.is_alive()


def test_an_answer_whose_setting_up_fails_records_why_and_the_runner_is_free():
    members = [fake_member("a", ANSWER, on_decode=LoseAt(6)), fake_member("b", ANSWER, role="draft")]
    with fake_ensemble(*members, segment_tokens=4, model_exit=False) as ensemble:
        with pytest.raises(SpecemError):
            ensemble.generate(QUESTION)  # a is lost, and b cannot verify
        ensemble.members[0].model.comes_back = False
        record = Record()
        stream = ensemble.stream(QUESTION).log_to(record)
        with pytest.raises(SpecemError, match="no member left can answer"):
            next(stream)
        [failure] = record.failures
        assert re.fullmatch(r"no member left can answer \(a: cannot come back: .+\)", failure)
        ensemble.members[0].model.comes_back = True
        assert ensemble.generate(QUESTION).text.startswith("Six")


def read_closed_during(monkeypatch, ensemble, method: str) -> tuple[list[Event], Record]:
    """Read an answer on a thread and close its stream from here once ``RoundLoop.<method>`` has
    done its work the first time and before it returns (the step is still running)."""
    held_once, release = threading.Event(), threading.Event()
    original = getattr(rounds.RoundLoop, method)

    def held(loop, *args):
        result = original(loop, *args)
        if not held_once.is_set():
            held_once.set()
            release.wait(10)
        return result

    monkeypatch.setattr(rounds.RoundLoop, method, held)
    record = Record()
    stream = ensemble.stream("Tell a story.").log_to(record)
    got: list[Event] = []
    reader = threading.Thread(target=lambda: got.extend(stream))
    reader.start()
    assert held_once.wait(10)
    stream.close()
    release.set()
    reader.join(10)
    assert not reader.is_alive()
    return got, record


def test_a_stream_closed_while_a_round_runs_ends_cancelled_when_the_round_returns(monkeypatch):
    members = fake_member("a", "one two three four five six"), fake_member("b", "x")
    with fake_ensemble(*members, max_tokens=40) as ensemble:
        got, record = read_closed_during(monkeypatch, ensemble, "_round")
        assert [type(event) for event in got] == [StartEvent, FinalEvent]  # not the round it finished
        assert got[-1].finish_reason == "cancelled" and record.events == got
        assert ensemble.generate("Say hi.").text  # its place was given back


def test_a_stream_closed_during_its_last_step_keeps_how_the_answer_ended(monkeypatch):
    with fake_ensemble(fake_member("a", "one two three"), fake_member("b", "x"), max_tokens=40) as ensemble:
        got, record = read_closed_during(monkeypatch, ensemble, "final_event")
        assert isinstance(got[-1], FinalEvent) and got[-1].finish_reason == "eos" and record.events[-1] is got[-1]


def test_the_async_face_says_an_answer_that_failed_ended_with_none():
    members = [fake_member("a", ANSWER, on_decode=LoseAt(6)), fake_member("b", ANSWER, role="draft")]

    async def read(ensemble):
        said: list[str | None] = []
        got: list[Event] = []
        with pytest.raises(SpecemError, match="every member that could verify was lost"):
            async for event in ensemble.stream(QUESTION).events(ended=said.append):
                got.append(event)
        while not said:
            await asyncio.sleep(0.01)
        return got, said

    with fake_ensemble(*members, segment_tokens=4, model_exit=False) as ensemble:
        got, said = asyncio.run(asyncio.wait_for(read(ensemble), 5))
        assert isinstance(got[0], StartEvent) and said == [None]


def test_the_async_face_says_an_answer_closed_between_its_steps_ended_cancelled():
    record = Record(hold_at=2)  # the first round's write: the answer's thread is between its steps

    async def read(ensemble):
        said: list[str | None] = []
        stream = ensemble.stream("Tell a story.").log_to(record)
        events = stream.events(ended=said.append)
        first = await events.__anext__()
        assert await asyncio.to_thread(record.holding.wait, 10)
        answering = [thread for thread in threading.enumerate() if thread.name == "specem-answer"]
        stream.close()
        record.release.set()
        rest = [event async for event in events]
        while not said:
            await asyncio.sleep(0.01)
        return [first, *rest], said, answering

    with fake_ensemble(fake_member("a", "one two three four"), fake_member("b", "x"), max_tokens=40) as ensemble:
        got, said, answering = asyncio.run(asyncio.wait_for(read(ensemble), 5))
        assert [type(event) for event in got] == [StartEvent, RoundEvent] and said == ["cancelled"]
        assert len(answering) == 1 and answering[0].daemon  # a server may stop while a model steps
        assert ensemble.generate("Say hi.").text


def test_a_watcher_sees_every_event_as_it_streams_beside_the_record_in_the_order_read():
    with fake_ensemble(fake_member("a", ANSWER), fake_member("b", ANSWER)) as ensemble:
        record, seen, also = Record(), [], []
        stream = ensemble.stream(QUESTION, max_tokens=12)
        assert stream.log_to(record).watch(seen.append).watch(also.append) is stream
        read = list(stream)
        assert isinstance(read[0], StartEvent) and isinstance(read[-1], FinalEvent) and len(read) > 2
        assert seen == read == record.events == also
        cancelled = ensemble.stream(QUESTION)
        watched: list[Event] = []
        cancelled.watch(watched.append).cancel()
        final = cancelled.final()
        assert watched == [final] and final.finish_reason == "cancelled"
