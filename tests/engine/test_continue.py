"""Continuing a given answer: a conversation that ends with an assistant message goes on
from that text (the chat app's pick-and-continue, the API's and the server's prefill)."""

from __future__ import annotations

import pytest

from specem_local.errors import SpecemError
from tests.engine.conftest import QUESTION, fake_ensemble
from tests.engine.test_round import RIGHT, WRONG, split, trio


def conversation(partial: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": partial}]


def test_greedy_continuation_of_the_first_rounds_gives_back_the_same_answer():
    ensemble = fake_ensemble(*trio(), segment_tokens=6, model_exit=False)
    _, rounds, final = split(list(ensemble.stream(QUESTION)))
    assert len(rounds) > 3
    for k in (1, 2, len(rounds) - 1):
        prefix = "".join(event.text for event in rounds[:k])
        continued = ensemble.generate(conversation(prefix))
        assert prefix + continued.text == final.text  # the event text is the continuation only
        assert continued.finish_reason == "eos"


def test_an_answer_goes_on_from_a_losing_candidate():
    ensemble = fake_ensemble(*trio(), segment_tokens=6, model_exit=False)
    picked = WRONG[:7]  # "Seven, " : the small model's draft, which lost the first round
    events = list(ensemble.stream(conversation(picked)))
    _, rounds, final = split(events)
    assert events[0].prompt_tokens["big"] > ensemble.stream(QUESTION).__next__().prompt_tokens["big"]
    assert final.text and not final.text.startswith("Seven")
    assert "".join(event.text for event in rounds) == final.text


def test_a_conversation_of_only_an_answer_is_refused():
    ensemble = fake_ensemble(*trio())
    with pytest.raises(SpecemError, match="must end with a user message"):
        ensemble.stream([{"role": "assistant", "content": "The"}])
    assert ensemble.generate(QUESTION).text == RIGHT  # and the next answer works
