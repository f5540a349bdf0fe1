"""A verifier does not decode again the tokens it drafted itself: a candidate that starts like
its own draft shares those KV cells and takes their scores from the drafting rows."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from specem_local.engine.member import Member
from specem_local.engine.sampling import greedy_sampler
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member

TARGET = "The answer is 42, because six times seven is forty-two."
CANDIDATES = {  # after the one token (T) that the first answer committed
    1: "he answer is 41",  # starts like the draft, then leaves it
    2: "he answer",  # inside the draft
    3: "Seven, I guess.",  # nothing in common
}


def prompted(drafts: bool) -> Member:
    member = fake_member("judge", TARGET, n_seq_max=5)
    fake_ensemble(member, fake_member("other", "Seven")).generate(QUESTION, max_tokens=1)
    member.start(member.tokens)  # the prompt alone
    if drafts:
        assert member.draft(14, greedy_sampler(), threading.Event()).text == "he answer is 42,"
    return member


@pytest.mark.parametrize("scoring", ["logit", "logprob"])
def test_scores_are_those_of_a_verifier_that_did_not_draft(scoring):
    drafted, plain = prompted(drafts=True), prompted(drafts=False)
    before = drafted.model.decoded_rows
    ending = frozenset({2})
    with_draft = drafted.score(CANDIDATES, scoring, ending).scores
    without = plain.score(CANDIDATES, scoring, ending).scores
    assert with_draft == pytest.approx(without, abs=1e-9)
    decoded = drafted.model.decoded_rows - before
    assert decoded == len("1") + len("Seven, I guess.")  # only the tails no draft covered


@pytest.mark.parametrize("winner", [1, 2, 3])
def test_a_winner_that_shares_the_draft_is_adopted_with_the_right_cells(winner):
    member = prompted(drafts=True)
    scored = member.score(CANDIDATES, "logprob")
    decodes = member.model.decodes
    member.commit(winner, CANDIDATES[winner], None, scored)
    assert member.model.decodes == decodes
    assert member.model.sequence(0) == member.tokens
    assert len(member.model.cells) == len(member.tokens)  # the draft's other cells are gone
    assert member.model.tokenize(CANDIDATES[winner]) == member.tokens[-len(member.model.tokenize(CANDIDATES[winner])) :]
    np.testing.assert_array_equal(member.last_row, member.model.next_logits(member.tokens))


def test_candidates_scored_one_at_a_time_share_the_draft_too():
    drafted, plain = prompted(drafts=True), prompted(drafts=False)
    drafted.model.max_batch = plain.model.max_batch = 15  # room for one tail at a time only
    with_draft = drafted.score(CANDIDATES, "logprob").scores
    assert with_draft == pytest.approx(plain.score(CANDIDATES, "logprob").scores, abs=1e-9)
    drafted.commit(1, CANDIDATES[1], None, None)
    assert drafted.model.sequence(0) == drafted.tokens
