"""An answer closed from another thread while one of its steps runs (the server does this when a
client hangs up) keeps its place until that step returns: two answers decoding on one place's
models at once abort llama.cpp (a GGML_ASSERT in get_rows, seen through ``specem serve``)."""

from __future__ import annotations

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
