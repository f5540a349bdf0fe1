"""Several answers at once (issue 48) on fake members: each place's answer is the answer it
gives alone (greedy), their rows share decode batches, a cancelled or failing answer leaves the
others whole, an answer whose cells do not fit waits, and no model is used by two threads at
once. The fakes answer from the prompt, so an answer that read another place's cells is wrong."""

from __future__ import annotations

import threading

import pytest

from specem_local.backend.protocol import BatchRow, ContextFull
from specem_local.engine import Ensemble
from specem_local.engine.places import Decode, DecodeTurns, SharedModel
from specem_local.errors import SpecemError
from specem_local.settings import EnsembleSettings
from tests.engine.conftest import fake_member
from tests.fake_model import FakeModel

WORDS = ["apple", "river", "stone", "cloud", "ember", "frost", "grove", "harbor"]


class Echo(FakeModel):
    """Answers "You said WORD." for the last word of the prompt."""

    def next_logits(self, history):
        text = b"".join(self.pieces[t] for t in history).decode(errors="replace")
        asked = text.split("### User:\n")[-1].split()[0] if "### User:" in text else "nothing"
        self.target = f"You said {asked}, twice {asked}.".encode()
        return super().next_logits(history)


def echo(name: str, places: int, **options):
    member = fake_member(name, "", n_ctx=4096, n_seq_max=4 * places, **options)
    member.model.__class__ = Echo
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
        turns, model = together.runner.turns, together.runner.models[0]
        turns.max_wait = 5.0  # a batch goes only when every answer in a step waits for a decode: shared, always
        answered = {a.index: a.final.text for a in together.answers(WORDS)}
        assert model.violations == []
        assert turns.decodes > turns.batches  # rows of several answers per batch
        assert model.decodes < solo_decodes
    assert [answered[i] for i in range(len(WORDS))] == solo
    assert all(f"You said {word}" in text for word, text in zip(WORDS, solo))


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
    shared = SharedModel(model, 2, DecodeTurns())
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
