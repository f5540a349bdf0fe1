"""Threads and lifetimes: one answer at a time, a cancel token per answer, and a close() that
never frees a model under a running decode."""

from __future__ import annotations

import threading
import time

import pytest

from specem_local.engine import Ensemble
from specem_local.engine import runner as runner_module
from specem_local.engine.loading import Loaded
from specem_local.errors import SpecemError
from specem_local.events import FinalEvent, RoundEvent, StartEvent
from specem_local.settings import EnsembleSettings, with_overrides
from tests.conftest import poll_until
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member

TEXT = "One two three four five six seven eight nine ten eleven twelve."
SAMPLED = {"greedy": False, "temperature": 1.2, "seed": 3, "max_tokens": 40}


def pair(**options):
    return fake_member("a", TEXT, n_params=3000, **options), fake_member("b", "Ten nine eight.", **options)


def test_a_second_answer_while_one_is_open_is_an_error_not_a_hang():
    ensemble = fake_ensemble(*pair())
    first = ensemble.stream(QUESTION)
    assert isinstance(next(first), StartEvent)
    with pytest.raises(SpecemError, match="another answer is still open"):
        ensemble.generate("Something else?")
    assert first.final().text == TEXT  # the open answer is unharmed
    assert ensemble.generate(QUESTION).text == TEXT  # and the next one may start


def test_an_abandoned_answer_gives_the_ensemble_back():
    ensemble = fake_ensemble(*pair())
    stream = ensemble.stream(QUESTION)
    next(stream)
    stream.close()
    assert ensemble.generate(QUESTION).text == TEXT
    abandoned = ensemble.stream(QUESTION)
    next(abandoned)
    del abandoned  # dropped without close(): the same
    assert ensemble.generate(QUESTION).text == TEXT


def test_a_cancel_before_the_first_step_is_not_lost():
    ensemble = fake_ensemble(*pair())
    stream = ensemble.stream(QUESTION)
    stream.cancel()  # Esc pressed just after Enter, before the worker starts the answer
    events = list(stream)
    assert events[-1].finish_reason == "cancelled" and events[-1].rounds == 0
    assert all(member.model.decodes == 0 for member in ensemble.members)  # not even the prompt


def test_a_cancel_mid_draft_stops_the_answer_and_the_next_is_as_from_fresh():
    cancel_at = {"decode": 0}

    def cancel_on_the_fifth_decode(model, rows):
        cancel_at["decode"] += 1
        if cancel_at["decode"] == 5:
            ensemble.cancel()  # from inside a decode, as another thread would

    ensemble = fake_ensemble(*pair(on_decode=cancel_on_the_fifth_decode))
    final = ensemble.stream(QUESTION, **SAMPLED).final()
    assert final.finish_reason == "cancelled" and final.rounds == 0
    after = ensemble.generate(QUESTION, **SAMPLED).text
    assert fake_ensemble(*pair()).generate(QUESTION, **SAMPLED).text == after


def test_close_waits_for_the_decode_in_flight():
    inside, release = threading.Event(), threading.Event()

    def block_once(model, rows):
        if not inside.is_set() and model.decodes > 3:
            inside.set()
            release.wait(10)

    ensemble = fake_ensemble(*pair(on_decode=block_once))
    stream = ensemble.stream(QUESTION)
    outcome = {}

    def answer():
        try:
            outcome["events"] = list(stream)
        except SpecemError as error:
            outcome["error"] = str(error)

    worker = threading.Thread(target=answer)
    worker.start()
    assert inside.wait(10)
    closer = threading.Thread(target=ensemble.close)
    closer.start()
    # close() has begun: it cancels the answer, then waits for the step
    poll_until(lambda: stream.cancelled, 10, "close() never cancelled the answer", every=0.001)
    release.set()  # a close() that did not wait would already have freed the models under the decode
    closer.join(10)
    worker.join(10)
    assert not closer.is_alive() and not worker.is_alive()
    assert all(member.model.closed and member.model.violations == [] for member in ensemble.members)
    assert "closed during the answer" in outcome.get("error", "") or outcome["events"][-1].finish_reason == "cancelled"
    with pytest.raises(SpecemError, match="closed"):
        ensemble.stream(QUESTION)


def test_close_with_an_open_answer_in_the_same_thread_does_not_hang():
    ensemble = fake_ensemble(*pair())
    stream = ensemble.stream(QUESTION)
    next(stream)
    ensemble.close()
    with pytest.raises(SpecemError, match="closed during the answer"):
        next(stream)
    assert all(member.model.violations == [] for member in ensemble.members)


def test_cancel_from_another_thread_between_rounds():
    ensemble = fake_ensemble(*pair(), segment_tokens=2)
    stream = ensemble.stream(QUESTION)
    events = []
    for event in stream:
        events.append(event)
        if isinstance(event, RoundEvent) and event.index == 2:
            canceller = threading.Thread(target=stream.cancel)
            canceller.start()
            canceller.join()
    assert events[-1].finish_reason == "cancelled" and events[-1].rounds == 2


def test_models_that_decode_at_once_share_the_cores(monkeypatch):
    monkeypatch.setattr(runner_module, "available_cores", lambda: 4)
    members = [fake_member(name, TEXT) for name in "abc"]
    ensemble = Ensemble(members, EnsembleSettings(greedy=True), loaded=Loaded(members, threads_per_model=3))
    seen: dict[str, set[int]] = {"threads": set(), "round-robin": set()}

    def threads_now(drafting: str):
        return lambda _item: seen[drafting].update(m.model.threads for m in members)

    for drafting in seen:
        settings = with_overrides(ensemble.settings, drafting=drafting)
        ensemble.runner.run_each(settings, threads_now(drafting), [0, 1, 2])  # three at once: 4 // 3 cores each
    assert seen == {"threads": {1}, "round-robin": {3}}  # one at a time: threads_per_model
    ensemble.runner.run_each(with_overrides(ensemble.settings, drafting="threads"), threads_now("threads"), [0, 1])
    assert seen["threads"] == {1, 2}
    assert ensemble.generate(QUESTION, drafting="threads").text == TEXT


def test_an_error_in_one_worker_waits_for_the_others():
    ensemble = fake_ensemble(*pair())
    started, finished = threading.Event(), []

    def work(item: int) -> None:
        if item == 0:
            started.wait(5)
            raise RuntimeError("boom")
        started.set()
        time.sleep(0.2)  # still decoding when the other has failed
        finished.append(item)

    with pytest.raises(RuntimeError, match="boom"):
        ensemble.runner.run_each(with_overrides(ensemble.settings, drafting="threads"), work, [0, 1])
    assert finished == [1]  # the step ended only when no worker was left using a model


def test_a_closed_stream_yields_nothing_more():
    ensemble = fake_ensemble(*pair())
    first = ensemble.stream(QUESTION)
    next(first)
    first.close()
    second = ensemble.stream(QUESTION)
    assert second.final().text == TEXT
    assert list(first) == []  # it does not go on beside (or after) the next answer


def test_an_answer_gives_the_ensemble_back_with_its_final_event():
    ensemble = fake_ensemble(*pair())
    stream = ensemble.stream(QUESTION)
    for event in stream:
        if isinstance(event, FinalEvent):
            break  # the loop never asks for the end of the iteration
    assert ensemble.generate(QUESTION).text == TEXT


def test_an_answer_broken_off_by_an_exception_ends_as_cancelled():
    interrupted = []

    def interrupt(model, rows):
        if model.decodes == 40 and not interrupted:
            interrupted.append(model)
            raise KeyboardInterrupt  # Ctrl-C inside a step

    ensemble = fake_ensemble(*pair(on_decode=interrupt), segment_tokens=4)
    stream = ensemble.stream(QUESTION)
    with pytest.raises(KeyboardInterrupt):
        for _ in stream:
            pass
    final = stream.final()
    assert final.finish_reason == "cancelled" and final.rounds > 0 and TEXT.startswith(final.text)
    assert ensemble.generate(QUESTION).text == TEXT


@pytest.mark.parametrize("drafting", ["round-robin", "threads"])  # threads: close() from a worker thread
def test_close_from_inside_a_step_is_an_error_not_a_deadlock(drafting):
    errors = []

    def close_now(model, rows):
        if model.decodes == 2:
            try:
                ensemble.close()
            except SpecemError as error:
                errors.append(str(error))

    ensemble = fake_ensemble(*pair(on_decode=close_now))
    assert ensemble.generate(QUESTION, drafting=drafting).text == TEXT
    assert errors and "from inside an answer's step" in errors[0]


def test_auto_drafting_uses_threads_only_when_a_model_runs_on_a_gpu():
    ensemble = fake_ensemble(fake_member("a", "One.", n_params=2), fake_member("b", "Two."), fake_member("c", "Three."))
    seen: set[str] = set()

    def where(_item: int) -> None:
        seen.add(threading.current_thread().name)

    ensemble.runner.run_each(ensemble.settings, where, [1, 2, 3])
    assert ensemble.settings.drafting == "auto" and seen == {threading.current_thread().name}  # CPU: round-robin
    ensemble.members[0].model.placement = "GPU 25/25 layers"
    seen.clear()
    ensemble.runner.run_each(ensemble.settings, where, [1, 2, 3])
    assert all(name.startswith("specem") for name in seen)


def test_threads_draft_at_once_with_one_place_and_say_they_cannot_with_several():
    from specem_local.engine import Ensemble

    def members():
        return [fake_member("a", "One.", n_params=2, n_seq_max=8), fake_member("b", "Two.", n_seq_max=8)]

    seen: set[str] = set()

    def where(_item: int) -> None:
        seen.add(threading.current_thread().name)

    threads = EnsembleSettings(greedy=True, reasoning_budget=0, drafting="threads")
    with Ensemble(members(), threads) as alone:
        alone.runner.run_each(alone.settings, where, [1, 2])
        assert all(name.startswith("specem") for name in seen) and not alone.warnings
    with pytest.warns(UserWarning, match='drafting = "threads" takes effect only with parallel = 1'):
        together = Ensemble(members(), threads, parallel=2)
    with together:
        assert len(together.warnings) == 1
