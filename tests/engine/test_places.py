"""Several answers at once (issue 48) on fake members: each place's answer is the answer it
gives alone (greedy), their rows share decode batches, a cancelled or failing answer leaves the
others whole, an answer whose cells do not fit waits, and no model is used by two threads at
once. The fakes answer from the prompt, so an answer that read another place's cells is wrong."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

from specem_local.backend.protocol import BatchRow, ContextFull, MemberLost, StepAbandoned
from specem_local.backend.scoring import RowScores
from specem_local.engine import Ensemble
from specem_local.engine.places import Batcher, Decode, SharedModel, _part
from specem_local.errors import SpecemError
from specem_local.settings import EnsembleSettings
from tests.engine.conftest import fake_member
from tests.fake_model import FakeModel

WORDS = ["apple", "river", "stone", "cloud", "ember", "frost", "grove", "harbor"]


class Echo(FakeModel):
    """Answers "You said WORD, twice WORD." for the first word of the prompt (the lighter fake
    says it its own way, so the members disagree and every round is verified)."""

    said = "said"

    def next_logits(self, history):
        text = b"".join(self.pieces[t] for t in history).decode(errors="replace")
        asked = text.split("### User:\n")[-1].split()[0] if "### User:" in text else "nothing"
        self.target = f"You {self.said} {asked}, twice {asked}.".encode()
        return super().next_logits(history)


class Echoes(Echo):
    said = "told me"


def echo(name: str, places: int, **options):
    member = fake_member(name, "", n_ctx=4096, n_seq_max=4 * places, **options)
    member.model.__class__ = Echo if options.get("n_params", 1000) > 1000 else Echoes
    return member


def ensemble(places: int, **settings) -> Ensemble:
    members = [echo("a", places, n_params=3000), echo("b", places)]
    chosen = EnsembleSettings(**{"greedy": True, "reasoning_budget": 0, "max_tokens": 40, **settings})
    return Ensemble(members, chosen, parallel=places)


def test_answers_run_together_are_the_answers_run_alone_and_share_batches():
    with ensemble(1) as alone:
        solo = [alone.generate(word).text for word in WORDS]
        solo_decodes = alone.members[0].model.decodes
    with ensemble(4) as together:
        batcher, model = together.runner.batcher, together.runner.models[0]
        batcher.max_wait = 5.0  # a batch goes only when every answer in a step waits for a decode: shared, always
        answered = {a.index: a.final.text for a in together.answers(WORDS)}
        assert model.violations == []
        assert batcher.decodes > batcher.batches  # rows of several answers per batch
        assert model.decodes < solo_decodes
    assert [answered[i] for i in range(len(WORDS))] == solo
    assert all(f"You said {word}" in text for word, text in zip(WORDS, solo))
    assert together.runner.batcher.batches  # (the closed runner keeps its counts)


def test_every_shared_batch_is_decoded_on_one_thread():
    """llama.cpp's CPU backend decodes on an OpenMP team of the calling thread: answers taking
    turns to call it woke a sleeping team for each decode (docs/performance.md)."""
    decoding: set[int] = set()

    def recorded(call):
        def decode(*args, **kwargs):
            decoding.add(threading.get_ident())
            return call(*args, **kwargs)

        return decode

    with ensemble(4) as together:
        for model in together.runner.models:
            model.decode, model.decode_scores = recorded(model.decode), recorded(model.decode_scores)
        for answered in together.answers(WORDS, ordered=True):
            assert answered.final.text.startswith(f"You said {WORDS[answered.index]}")
        assert together.runner.batcher.decodes > together.runner.batcher.batches  # batches were shared
    assert len(decoding) == 1 and threading.get_ident() not in decoding
    assert not [t for t in threading.enumerate() if t.ident in decoding]  # closing the ensemble ended it


def test_answers_come_in_order_when_asked_and_a_bad_item_is_handed_back_with_its_error():
    with ensemble(3) as together:
        got = list(together.answers([*WORDS[:3], {"schema": "{"}, {"prompt": "zebra", "max_tokens": 0}], ordered=True))
        assert [a.index for a in got] == [0, 1, 2, 3, 4]
        assert got[3].error is not None and "prompt" in str(got[3].error)
        assert got[4].error is not None and "max_tokens" in str(got[4].error)
        assert [a.final.text.split()[2] for a in got[:3]] == ["apple,", "river,", "stone,"]
        assert together.generate("again").text.startswith("You said again")  # the next answer comes


def test_a_cancelled_answer_leaves_the_others_whole():
    with ensemble(4, max_tokens=200, ignore_eos=True) as together:
        streams = [together.stream(word) for word in WORDS[:3]]
        finals: dict[int, object] = {}

        def read(index: int) -> None:
            for event in streams[index]:
                if index == 1 and getattr(event, "index", 0) == 2:
                    streams[1].cancel()
            finals[index] = streams[index].final()

        threads = [threading.Thread(target=read, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
            assert not thread.is_alive()
        assert finals[1].finish_reason == "cancelled"
        assert finals[0].finish_reason == finals[2].finish_reason == "length"
        assert finals[0].text.startswith("You said apple") and finals[2].text.startswith("You said stone")


def test_every_place_open_is_an_error_and_an_answer_that_does_not_fit_waits():
    with ensemble(2) as together:
        first, second = together.stream("apple"), together.stream("river")
        next(first), next(second)
        with pytest.raises(SpecemError, match="all 2 places"):
            next(together.stream("stone"))
        first.final(), second.final()
    small = Ensemble(
        [echo("a", 3, n_params=3000), echo("b", 3)],
        EnsembleSettings(greedy=True, reasoning_budget=0, max_tokens=2000),  # one answer's cells fill n_ctx
        parallel=3,
    )
    with small:
        seen = []
        original = small.runner.begin

        def begin(answer, cells=0):
            place = original(answer, cells)
            seen.append(len(small.runner._open))
            return place

        small.runner.begin = begin
        answered = list(small.answers(WORDS[:3]))
        assert all(a.final is not None and a.final.text.startswith("You said") for a in answered)
        assert max(seen) == 1  # each waited for the one before


def test_a_shared_batch_with_no_room_is_taken_back_and_each_decode_runs_alone():
    """Two places' prompts that fit one at a time but not together (a fragmented cache): the
    batch is taken back, each runs alone, and each gets its own rows."""
    model = FakeModel("abc", n_seq_max=8, max_batch=5)
    shared = SharedModel(model, 2, Batcher())
    first, second = shared.view(0), shared.view(1)
    rows = [BatchRow(token, position, 0, position == 3) for position, token in enumerate(model.tokenize("wxyz"))]
    alone = [Decode(shared, [BatchRow(r.token, r.position, r.seq_id + v.base, r.wants_logits) for r in rows])
             for v in (first, second)]  # fmt: skip
    shared.run(alone)
    assert all(d.error is None and d.result.shape == (1, model.n_vocab) for d in alone)
    assert model.sequence(0) == model.sequence(4) == model.tokenize("wxyz")  # each sequence once, no leftovers
    assert len(model.cells) == 8
    too_long = Decode(shared, [BatchRow(t, p, 1, False) for p, t in enumerate(model.tokenize("abcdefgh"))])
    shared.run([too_long])
    assert isinstance(too_long.error, ContextFull)  # alone it does not fit: its own error, nobody else's


class Recorded:
    """A stand-in for a shared model: records the groups it is asked to decode."""

    def __init__(self, runs: list) -> None:
        self.runs = runs

    def run(self, group: list) -> None:
        self.runs.append([d.rows for d in group])


def test_the_largest_group_goes_first_and_a_decode_passed_over_twice_goes_next():
    runs: list = []
    batcher = Batcher()
    a, b = Recorded(runs), Recorded(runs)
    waiting = Decode(b, ["b"], since=0.0)  # the oldest, of its own kind
    batcher._pending = [waiting, Decode(a, ["a1"], since=1.0), Decode(a, ["a2"], since=2.0)]
    with batcher._state:
        batcher._run_next()
        assert runs == [[["a1"], ["a2"]]] and waiting.passed == 1 and not waiting.done
        batcher._pending += [Decode(a, ["a3"]), Decode(a, ["a4"])]
        batcher._run_next()
        assert runs[-1] == [["a3"], ["a4"]] and waiting.passed == 2
        batcher._pending += [Decode(a, ["a5"]), Decode(a, ["a6"])]
        batcher._run_next()
        assert runs[-1] == [["b"]] and waiting.done  # passed over twice: its turn, though its group is smaller
    assert batcher.batches == 3 and batcher.decodes == 5


def test_a_decode_waits_for_the_other_steps_at_most_max_wait():
    batcher = Batcher(max_wait=0.3)
    runs: list = []
    with batcher.step(), batcher.step():  # two answers in a step; the other sends nothing
        started = time.monotonic()
        batcher.run(Decode(Recorded(runs), ["x"]))
        waited = time.monotonic() - started
    assert 0.25 <= waited < 3 and runs == [[["x"]]]
    started = time.monotonic()
    batcher.run(Decode(Recorded(runs), ["y"]))  # no answer in a step: it goes at once
    assert time.monotonic() - started < 0.25


def test_a_decode_waits_for_the_other_steps_decode_and_they_share_one_batch():
    """Two answers in a step: the first decode waits for the other's, and both rows go into one
    batch (what the waiting is for), long before ``max_wait``."""
    batcher = Batcher(max_wait=5.0)
    runs: list = []
    model, both_in_step = Recorded(runs), threading.Barrier(2, timeout=10)

    def answer(word: str) -> None:
        with batcher.step():
            both_in_step.wait()
            batcher.run(Decode(model, [word]))

    other = threading.Thread(target=answer, args=("y",))
    started = time.monotonic()
    other.start()
    answer("x")
    other.join(10)
    assert not other.is_alive()
    assert len(runs) == 1 and sorted(runs[0]) == [["x"], ["y"]]  # one batch held both rows
    assert batcher.batches == 1 and batcher.decodes == 2
    assert time.monotonic() - started < 4  # it went when the other came, not at max_wait


class Stuck(FakeModel):
    """A model on a machine that went silent: a decode waits until it is interrupted, then is
    given up (as ``RemoteModel`` does)."""

    def __init__(self) -> None:
        super().__init__("abc", n_seq_max=8)
        self.given_up = threading.Event()
        self.ended: list[float] = []
        self.silent = True

    def interrupt(self) -> None:
        self.given_up.set()

    def decode(self, rows):
        if self.silent:
            stopped = self.given_up.wait(10)
            self.ended.append(time.monotonic())
            if stopped:
                raise StepAbandoned("stopped waiting for abc on a silent machine")
        return super().decode(rows)


def test_ctrl_c_while_a_batch_decodes_gives_it_up_and_raises_once_it_has_ended():
    """The batch runs on the decoding thread: Ctrl-C in the waiting one stops a batch stuck on
    another machine at once, never hands its rows back half done, and never lets the next
    batch start beside it."""
    batcher, stuck = Batcher(), Stuck()
    shared = SharedModel(stuck, 2, batcher)
    decode = Decode(shared, [BatchRow(66, 0, 0, True)])
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as Python's own
    # A real signal wakes a wait: sent to this thread alone, and only while the handler above is
    # the one installed (the timer has ended before pytest's own handler is back).
    ctrl_c = threading.Timer(0.1, signal.pthread_kill, (threading.get_ident(), signal.SIGINT))
    started = time.monotonic()
    try:
        ctrl_c.start()
        with pytest.raises(KeyboardInterrupt):
            batcher.run(decode)
    finally:
        ctrl_c.cancel()
        ctrl_c.join(10)
        signal.signal(signal.SIGINT, previous)
    assert not ctrl_c.is_alive()
    interrupted = time.monotonic()
    assert interrupted - started < 5 and stuck.ended and stuck.ended[0] <= interrupted
    assert decode.done and isinstance(decode.error, StepAbandoned)
    stuck.silent = False  # it answers again: the next batch runs
    assert not batcher._busy and len(batcher.run(Decode(shared, [BatchRow(66, 0, 4, True)]))) == 1
    batcher.close()


def test_every_decode_of_a_failed_batch_gets_its_error():
    model = FakeModel("abc", n_seq_max=8)
    shared = SharedModel(model, 2, Batcher())
    model.lose("the machine stopped answering")
    group = [Decode(shared, [BatchRow(66, 0, seq, True)]) for seq in (0, 4)]
    shared.run(group)
    assert all(isinstance(d.error, MemberLost) and d.result is None for d in group)


def test_a_place_moves_only_its_own_sequences():
    model = FakeModel("abc", n_seq_max=8)
    shared = SharedModel(model, 2, Batcher())
    mine, other = shared.view(1), shared.view(0)
    assert (mine.base, mine.n_seq_max, other.base) == (4, 4, 0)
    for view in (mine, other):
        view.decode([BatchRow(t, p, 0, p == 2) for p, t in enumerate(model.tokenize("xyz"))])
    mine.seq_copy(0, 2, 0, 2)
    assert model.sequence(6) == model.tokenize("xy") and model.sequence(2) == []
    mine.seq_keep(2)  # as llama.cpp's: only sequence 2 is left of this place; the other place keeps its own
    assert model.sequence(4) == [] and model.sequence(6) == model.tokenize("xy")
    assert model.sequence(0) == model.tokenize("xyz")
    mine.seq_remove(-1, 1, -1)
    assert model.sequence(6) == model.tokenize("x") and len(model.sequence(0)) == 3
    mine.clear()
    assert model.sequence(6) == [] and model.sequence(0) == model.tokenize("xyz")
    scores = mine.decode_scores([BatchRow(t, p, 1, True) for p, t in enumerate(model.tokenize("ab"))], [0, 1],
                                normalise=True)  # fmt: skip
    assert len(scores.chosen) == 2 and model.sequence(5) == model.tokenize("ab")


def test_a_cancel_interrupts_a_shared_step_only_when_no_other_answer_is_in_one():
    model = FakeModel("abc", n_seq_max=8)
    interrupted = []
    model.interrupt = lambda: interrupted.append(1)
    batcher = Batcher()
    view = SharedModel(model, 2, batcher).view(0)
    with batcher.step():
        view.interrupt()
        with batcher.step():
            view.interrupt()
    assert interrupted == [1]


def test_a_shared_scoring_batch_hands_each_decode_exactly_its_kept_rows():
    """The rows kept whole are split at each decode's first and last row, no further."""
    kept = {index: np.full(2, float(index)) for index in (1, 2, 3, 4)}
    scores = RowScores(np.arange(5.0), np.zeros(5), kept)
    middle = _part(scores, 2, 2)  # rows 2 and 3
    assert sorted(middle.kept) == [0, 1] and middle.kept[0][0] == 2.0 and middle.kept[1][0] == 3.0
    assert list(middle.chosen) == [2.0, 3.0]
