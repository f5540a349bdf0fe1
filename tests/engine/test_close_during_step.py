"""An answer closed from another thread while one of its steps runs (the server does this when a
client hangs up) keeps its place until that step returns: two answers decoding on one place's
models at once abort llama.cpp (a GGML_ASSERT in get_rows, seen through ``specem serve``)."""

from __future__ import annotations

import asyncio
import threading

from tests.engine.conftest import fake_ensemble, fake_member


def test_a_stream_closed_during_its_step_gives_its_place_back_only_when_the_step_returns():
    in_step, release = threading.Event(), threading.Event()

    def hold(model, _rows):
        if model.decodes == 3:  # a step of the first answer, after its prompt
            in_step.set()
            release.wait(10)

    members = fake_member("a", "one two three four five six", on_decode=hold), fake_member("b", "x")
    with fake_ensemble(*members, max_tokens=40) as ensemble:
        first = ensemble.stream("Tell a story.")
        got: list[object] = []
        reader = threading.Thread(target=lambda: got.extend(first))
        reader.start()
        assert in_step.wait(10)
        first.close()  # as the server closes a stream whose client went away
        second = ensemble.stream("Say hi.")
        started = threading.Event()
        waiter = threading.Thread(target=lambda: (next(second), started.set()))
        waiter.start()
        assert not started.wait(0.5)  # the first answer's step still runs: no place for the second
        release.set()
        reader.join(10)
        assert started.wait(10)  # the step returned: the place is the second's
        waiter.join(10)
        assert got[-1].finish_reason == "cancelled"
        assert second.final().text


def test_the_async_events_say_how_the_answer_ended_and_one_left_early_ended_cancelled():
    async def read(ensemble, leave_after=None):
        said: list[object] = []
        got = []
        events = ensemble.stream("Tell a story.").events(ended=said.append)
        async for event in events:
            got.append(event)
            if leave_after is not None and len(got) >= leave_after:
                await events.aclose()  # as the server's route does when its client goes away
                break
        return got, said

    with fake_ensemble(fake_member("a", "one two three"), fake_member("b", "x"), max_tokens=40) as ensemble:
        events, said = asyncio.run(asyncio.wait_for(read(ensemble), 5))  # a hang fails
        assert said == [events[-1].finish_reason] and said[0] != "cancelled"

    left = threading.Event()  # the answer's steps wait until its reader has left, so it cannot end first

    def hold(_model, _rows):
        left.wait(10)

    with fake_ensemble(fake_member("a", "one two three", on_decode=hold), fake_member("b", "x")) as ensemble:

        async def left_early():
            _, said = await read(ensemble, leave_after=1)
            left.set()
            while not said:  # the answer's thread tells the loop when it has stopped
                await asyncio.sleep(0.01)
            return said

        assert asyncio.run(asyncio.wait_for(left_early(), 5)) == ["cancelled"]
