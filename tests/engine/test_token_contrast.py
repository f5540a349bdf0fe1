"""The token-level contrast in the round loop (``contrast`` with members of one vocabulary): the
expert drafts against its amateurs, which read every drafted token along instead of drafting."""

from __future__ import annotations

from specem_local.engine import vote
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_round import RIGHT, WRONG, split


def pair(**expert):
    """An expert and a smaller amateur with the same (byte-level) vocabulary, both after RIGHT."""
    return (
        fake_member("big", RIGHT, n_params=3000, **expert),
        fake_member("small", RIGHT, n_params=1000),
    )


TORN = dict(strength=4.0, runner_up="~")  # a plausible second choice at every step


def answer_bytes(member) -> bytes:
    """What the member's committed sequence 0 spells after the prompt."""
    tokens = member.model.sequence(0)
    return b"".join(member.model.token_bytes(t) for t in tokens)


def test_the_amateur_reads_along_and_keeps_its_cells():
    big, small = pair()
    ensemble = fake_ensemble(big, small, segment_tokens=6, contrast=0.5)
    start, rounds, final = split(list(ensemble.stream(QUESTION)))
    assert start.drafters == ("big",)  # the amateur reads along instead of drafting
    assert final.text == RIGHT and final.finish_reason == "eos"
    assert all(e.decision == "only-candidate" and e.candidates[0].contrasted_with == ("small",) for e in rounds)
    assert final.contrast_changed == 0  # a sure expert: one plausible token at every step
    read = small.model.decoded_rows - start.prompt_tokens["small"]  # one decode per drafted token, none to commit
    assert read == big.model.decoded_rows - start.prompt_tokens["big"] and final.drafted_tokens == 2 * read
    assert answer_bytes(small).endswith(RIGHT.encode())
    assert big.model.violations == small.model.violations == []


def test_an_amateur_as_sure_as_a_torn_expert_pushes_it_to_its_second_choice():
    """Where the expert is torn between two tokens, an amateur sure of the expert's favourite makes
    the other one the contrastive choice: a too-strong amateur hurts, as O'Brien & Lewis say."""
    assert fake_ensemble(pair(**TORN)[0]).generate(QUESTION).text == RIGHT  # the expert alone
    settings = dict(segment_tokens=6, contrast=0.5, max_tokens=12)
    _, rounds, final = split(list(fake_ensemble(*pair(**TORN), **settings).stream(QUESTION)))
    assert final.text == "~" * 12 and final.contrast_changed == 12  # 1.5 * 3 - 0 beats 1.5 * 4 - 0.5 * 8
    assert final.contrast_changed == sum(e.candidates[0].contrast_changed for e in rounds)
    assert "Drafted against small token by token (contrast): its top choice changed on 6" in vote.explain(rounds[0])
    gentle = fake_ensemble(*pair(**TORN), segment_tokens=6, contrast=0.1).generate(QUESTION)
    assert gentle.text == RIGHT and gentle.contrast_changed == 0  # 1.1 * 4 - 0.1 * 8 beats 1.1 * 3


def test_members_of_another_vocabulary_still_draft_and_the_vote_contrasts_per_segment():
    big, small = pair()
    other = fake_member("other", WRONG, n_params=2000, words=[" answer", " because"])
    ensemble = fake_ensemble(big, small, other, segment_tokens=6, contrast=0.5, model_exit=False)
    start, rounds, final = split(list(ensemble.stream(QUESTION)))
    assert start.drafters == ("big", "other") and final.text == RIGHT
    assert any(e.decision == "contrast" for e in rounds)  # two candidates: the contrastive vote
    for event in rounds:
        by_model = {c.model: c for c in event.candidates}
        assert by_model["big"].contrasted_with == ("small",) and by_model["other"].contrasted_with == ()
        assert set(by_model["big"].scores) == {"big", "small", "other"}  # the amateur still verifies
    assert answer_bytes(small).endswith(RIGHT.encode())
    assert all(m.model.violations == [] for m in (big, small, other))


def test_several_contrastive_drafts_a_round():
    big, small = pair(**TORN)
    ensemble = fake_ensemble(big, small, segment_tokens=6, contrast=0.25, draft_budget=3, model_exit=False, seed=3)
    _, rounds, final = split(list(ensemble.stream(QUESTION, max_tokens=40)))
    assert all(len(e.candidates) == 3 and all(c.model == "big" for c in e.candidates) for e in rounds)
    assert all(c.contrasted_with == ("small",) for e in rounds for c in e.candidates)
    assert answer_bytes(small).endswith(final.text.encode()) and answer_bytes(big).endswith(final.text.encode())
    assert big.model.violations == small.model.violations == []


def test_no_amateur_of_the_same_vocabulary_leaves_the_drafting_as_it_was():
    big = fake_member("big", RIGHT, n_params=3000)
    other = fake_member("other", RIGHT, n_params=1000, words=[" answer"])
    start, rounds, final = split(list(fake_ensemble(big, other, contrast=0.5, model_exit=False).stream(QUESTION)))
    assert start.drafters == ("big", "other") and final.text == RIGHT
    assert all(c.contrasted_with == () and c.contrast_changed is None for e in rounds for c in e.candidates)
