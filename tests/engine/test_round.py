"""The round loop with fake models: the vote, the weights, merged drafts, adopted cells, stops,
limits, the context, model exit, fast finish, verify-end, plain generation."""

from __future__ import annotations

import numpy as np
import pytest

from specem_local.engine import feedback, vote
from specem_local.errors import SpecemError
from specem_local.events import Candidate, FinalEvent, RoundEvent, StartEvent
from specem_local.settings import EnsembleSettings
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_lost_members import LoseAt

RIGHT = "The answer is 42, because six times seven is forty-two."
WRONG = "Seven, I guess."


def trio(**options):
    """A strong model and a middling one that agree, and a small one that does not."""
    return (
        fake_member("big", RIGHT, n_params=3000, **options),
        fake_member("mid", RIGHT, n_params=1500, words=[" answer", " because", " seven"], **options),
        fake_member("small", WRONG, n_params=500, **options),
    )


def split(events):
    start, *rounds, final = events
    assert isinstance(start, StartEvent) and isinstance(final, FinalEvent)
    assert all(isinstance(event, RoundEvent) for event in rounds)
    return start, rounds, final


def test_the_vote_the_weights_and_the_events_agree():
    ensemble = fake_ensemble(*trio(), segment_tokens=6, model_exit=False)
    start, rounds, final = split(list(ensemble.stream(QUESTION)))
    assert final.text == RIGHT and final.finish_reason == "eos"
    assert final.text == "".join(event.text for event in rounds)
    assert start.weights == ensemble.starting_weights() == pytest.approx({"big": 0.6, "mid": 0.3, "small": 0.1})
    names = list(start.models)
    weights = np.array([start.weights[name] for name in names])
    for number, event in enumerate(rounds, start=1):
        by_model = {c.model: c for c in event.candidates}
        distinct = [names.index(c.model) for c in event.candidates if c.same_as is None]
        assert event.decision == "vote" and len(distinct) > 1
        scores = np.full((3, 3), np.nan)
        for c in distinct:
            for verifier, score in by_model[names[c]].scores.items():
                scores[names.index(verifier), c] = score
        groups = {
            c: [names.index(m.model) for m in event.candidates if (m.same_as or m.model) == names[c]] for c in distinct
        }
        expected = vote.tally(scores, weights, groups, vote.VoteRule(segment_tokens=6))
        assert names[expected.winner] == event.author
        for c in distinct:
            assert by_model[names[c]].combined == pytest.approx(expected.combined[c])
        eta = feedback.learning_rate(1.0, 3, number)
        weights = feedback.hedge_update(weights, feedback.rewards(expected.shares, groups), eta)
        assert [event.weights[name] for name in names] == pytest.approx(list(weights))
    assert sum(final.wins.values()) == len(rounds) and final.wins["small"] == 0
    assert final.drafters_per_round == 3.0


def test_feedback_moves_the_weights_and_off_keeps_them():
    learned = fake_ensemble(*trio()).generate(QUESTION)
    fixed = fake_ensemble(*trio(), feedback=False).generate(QUESTION)
    assert fixed.weights == pytest.approx({"big": 0.6, "mid": 0.3, "small": 0.1})
    assert learned.weights["small"] < 0.1 - 0.01  # the model whose drafts lose is trusted less


def test_identical_drafts_are_one_candidate():
    twin = fake_member("mid", RIGHT, n_params=1500)  # the same tokenizer as big: the same drafts
    ensemble = fake_ensemble(trio()[0], twin, trio()[2], segment_tokens=6)
    rounds = [e for e in ensemble.stream(QUESTION) if isinstance(e, RoundEvent)]
    first = {c.model: c for c in rounds[0].candidates}
    assert first["mid"].same_as == "big" and first["big"].same_as is None  # the heavier author represents
    assert first["mid"].combined == first["big"].combined and first["mid"].scores == first["big"].scores
    assert set(first["big"].scores) == {"big", "mid", "small"}


def test_every_model_adopts_the_winner_without_decoding_it_again():
    ensemble = fake_ensemble(*trio(), segment_tokens=6)
    final = ensemble.generate(QUESTION)
    for member in ensemble.members:
        model = member.model
        assert model.sequence(0) == member.tokens  # the committed sequence, nothing else left over
        assert len(model.cells) == len(member.tokens)
        written = b"".join(model.token_bytes(t) for t in member.tokens).decode()
        assert written.endswith("### Assistant:\n" + final.text)
        assert model.violations == []


def test_a_winner_scored_in_line_is_adopted_not_decoded():
    member = fake_member("judge", RIGHT, words=[" answer"])
    drafter = fake_member("other", WRONG)
    ensemble = fake_ensemble(member, drafter)
    ensemble.generate(QUESTION, max_tokens=1)  # puts the prompt in place
    member.start(member.tokens)
    scored = member.score({1: " The answer", 2: " Seven"}, "logprob")
    decodes = member.model.decodes
    member.commit(2, " Seven", None, scored)
    assert member.model.decodes == decodes  # no decode: the cells of sequence 2 became sequence 0
    seven = member.model.tokenize(" Seven")
    assert member.model.sequence(0) == member.tokens and member.tokens[-len(seven) :] == seven
    np.testing.assert_array_equal(member.last_row, member.model.next_logits(member.tokens))


def test_a_stop_string_across_two_segments_cuts_the_answer_before_it():
    segments = [e.text for e in fake_ensemble(*trio(), segment_tokens=6).stream(QUESTION) if isinstance(e, RoundEvent)]
    boundary = len(segments[0])
    full = "".join(segments)
    stop = full[boundary - 2 : boundary + 3]
    final = fake_ensemble(*trio(), segment_tokens=6, stop=(stop,)).generate(QUESTION)
    assert final.finish_reason == "stop" and final.text == full[: full.index(stop)] and final.stop_sequence == stop
    later = full[boundary + 5 : boundary + 9]  # of several, the one met first is said
    final = fake_ensemble(*trio(), segment_tokens=6, stop=("never there", later, stop)).generate(QUESTION)
    assert final.stop_sequence == stop and final.text == full[: full.index(stop)]
    assert fake_ensemble(*trio(), segment_tokens=6).generate(QUESTION).stop_sequence == ""


def test_max_tokens_is_a_hard_limit():
    final = fake_ensemble(*trio(), segment_tokens=4).generate(QUESTION, max_tokens=9)
    assert final.finish_reason == "length" and final.tokens == 9  # finishing a word never runs past it


@pytest.mark.parametrize("limit", [1, 3, 5, 8])
def test_max_tokens_holds_for_text_the_format_forces_too(limit):
    """A key the schema forces is committed without a vote: cut where max_tokens ends, which ends the answer."""
    key = "the_name_of_the_city_in_question"
    schema = {
        "type": "object",
        "properties": {key: {"type": "string"}},
        "required": [key],
        "additionalProperties": False,
    }
    members = [fake_member(n, f'{{"{key}": "Paris"}}', n_params=p) for n, p in (("a", 3), ("b", 1))]
    final = fake_ensemble(*members).generate(QUESTION, schema=schema, max_tokens=limit, think=False)
    longest = max(len(m.model.tokenize(final.text)) for m in members)
    assert final.finish_reason == "length" and final.tokens <= limit and longest <= limit and final.text
    assert f'{{"{key}": "Paris"}}'.startswith(final.text)
    whole = fake_ensemble(*members).generate(QUESTION, schema=schema, max_tokens=64, think=False)
    assert whole.finish_reason == "eos" and whole.parsed == {key: "Paris"}
    events = list(fake_ensemble(*members).stream(QUESTION, schema=schema, max_tokens=limit, think=False))
    forced = [e for e in events if isinstance(e, RoundEvent) and e.decision == "forced"]
    assert forced and all(e.author == "" and e.candidates == () for e in forced)
    assert all(e.draft_seconds == e.draft_tokens == e.verify_seconds == {} and e.drafters == () for e in forced)


def test_a_member_lost_while_forced_text_is_committed_leaves_the_others_to_finish():
    key = "the_name_of_the_city_in_question"
    schema = {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]}
    answer = f'{{"{key}": "Paris"}}'
    members = [fake_member("a", answer, n_params=3, on_decode=LoseAt(2)), fake_member("b", answer, n_params=1)]
    events = list(fake_ensemble(*members).stream(QUESTION, schema=schema, max_tokens=64, think=False))
    first = next(e for e in events if isinstance(e, RoundEvent))
    assert first.decision == "forced" and list(first.lost) == ["a"]  # lost at the forced round's commit
    assert events[-1].finish_reason == "eos" and events[-1].parsed == {key: "Paris"} and list(events[-1].lost) == ["a"]


def test_a_full_context_shrinks_the_last_segments_instead_of_stopping_early():
    targets = (" ".join(["word"] * 200), " ".join(["other"] * 200), " ".join(["third"] * 200))
    members = [fake_member(name, text, n_ctx=120, n_params=size) for name, text, size in zip("abc", targets, (3, 2, 1))]
    events = list(fake_ensemble(*members, segment_tokens=10, max_tokens=500).stream(QUESTION))
    rounds, final = [e for e in events if isinstance(e, RoundEvent)], events[-1]
    assert final.finish_reason == "context" and all(e.decision == "vote" for e in rounds)
    assert all(e.verify_seconds for e in rounds)  # every round scored the other models' tails in line
    # It stops only when there is no room left for three one-token candidates.
    assert min(member.room for member in members) <= 3
    assert len(rounds[-1].text) < len(rounds[0].text)
    assert all(m.model.violations == [] for m in members)


def test_candidates_that_do_not_fit_together_are_scored_one_at_a_time():
    member = fake_member("judge", RIGHT, n_ctx=80)
    ensemble = fake_ensemble(member, fake_member("other", WRONG, n_ctx=80))
    ensemble.generate(QUESTION, max_tokens=1)
    member.start(member.tokens)
    candidates = {1: " one two three", 2: " four five six", 3: " seven eight"}
    assert member.room < sum(len(text) for text in candidates.values())  # byte tokens: one per character
    one_by_one = member.score(candidates, "logprob")
    assert one_by_one.seq_of == {}  # nothing kept to adopt: the winner is decoded when committed
    for index, text in candidates.items():
        assert one_by_one.scores[index] == pytest.approx(member.score({index: text}, "logprob").scores[index])
    added = member.commit(3, " seven eight", None, one_by_one)
    assert added == len(" seven eight") and member.model.sequence(0) == member.tokens


def test_a_batch_that_finds_no_kv_slot_is_scored_one_at_a_time():
    member = fake_member("judge", RIGHT)
    ensemble = fake_ensemble(member, fake_member("other", WRONG))
    ensemble.generate(QUESTION, max_tokens=1)
    member.start(member.tokens)
    member.model.max_batch = 12  # as if the free cells were scattered
    candidates = {1: " one two", 2: " four five"}  # 18 tokens: room enough, but not in one slot
    scored = member.score(candidates, "logprob")
    assert scored.seq_of == {} and len(member.model.cells) == len(member.tokens)  # no tail left behind
    for index, text in candidates.items():
        assert scored.scores[index] == pytest.approx(member.score({index: text}, "logprob").scores[index])


def test_model_exit_stops_the_losing_drafter():
    ensemble = fake_ensemble(*trio(), segment_tokens=4, model_exit=True, exit_warmup_rounds=1)
    _, rounds, final = split(list(ensemble.stream(QUESTION)))
    assert "small" in rounds[0].drafters and "small" not in rounds[-1].drafters
    assert final.drafters_per_round < 3 and final.text == RIGHT


def test_fast_finish_takes_a_draft_that_ends_the_answer_unverified():
    short = fake_member("short", "42.", n_params=5000)
    ensemble = fake_ensemble(*trio(), short, fast_finish=True)
    rounds = [e for e in ensemble.stream(QUESTION) if isinstance(e, RoundEvent)]
    assert rounds[0].decision == "fast-finish" and rounds[0].author == "short"
    assert rounds[0].verify_seconds == {} and all(c.combined is None for c in rounds[0].candidates)
    assert len(rounds) == 1


def test_verify_end_scores_the_end_of_an_answer_too():
    def second_round(verify_end: bool) -> dict[str, Candidate]:
        short = fake_member("short", "The answer is 42", n_params=100)
        ensemble = fake_ensemble(*trio(), short, verify_end=verify_end, feedback=False)
        event = [e for e in ensemble.stream(QUESTION) if isinstance(e, RoundEvent)][1]
        return {c.model: c for c in event.candidates}

    with_end, without = second_round(True), second_round(False)
    assert with_end["short"].ended and with_end["short"].text == " is 42"
    # big expects ", because" after it: the words are likely, ending there is not.
    assert with_end["short"].scores["big"] < without["short"].scores["big"] - 0.5
    assert with_end["big"].scores["small"] == pytest.approx(without["big"].scores["small"])  # it goes on: same


def test_one_model_is_plain_generation():
    ensemble = fake_ensemble(fake_member("solo", RIGHT), segment_tokens=5)
    start, rounds, final = split(list(ensemble.stream(QUESTION)))
    assert start.plain_generation and final.plain_generation and ensemble.plain_generation
    assert final.text == RIGHT and {e.decision for e in rounds} == {"only-candidate"}
    assert final.wins == {"solo": len(rounds)}


def test_draft_only_and_verify_only_models():
    members = (
        fake_member("judge", RIGHT, role="verify", n_params=3000),
        fake_member("writer", RIGHT, role="draft"),
        fake_member("other", WRONG, role="draft"),
    )
    ensemble = fake_ensemble(*members)
    start, rounds, final = split(list(ensemble.stream(QUESTION)))
    assert start.drafters == ("writer", "other") and set(start.weights) == {"judge"}
    assert final.text == RIGHT and all(e.author != "judge" for e in rounds)


def test_sampling_with_a_seed_is_the_same_answer_in_both_drafting_modes():
    settings = {"greedy": False, "temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 30}
    first = fake_ensemble(*trio(strength=3.0), seed=4, **settings).generate(QUESTION).text
    assert fake_ensemble(*trio(strength=3.0), seed=4, **settings).generate(QUESTION).text == first
    threads = fake_ensemble(*trio(strength=3.0), seed=4, drafting="threads", **settings).generate(QUESTION).text
    assert threads == first
    assert fake_ensemble(*trio(strength=3.0), seed=5, **settings).generate(QUESTION).text != first


def test_utf8_split_across_byte_tokens_never_makes_replacement_characters():
    text = "Réponse : 42 🙂 四十二, c'est ça."
    members = (fake_member("a", text, n_params=2), fake_member("b", text, words=["🙂", "四十"]))
    events = list(fake_ensemble(*members, segment_tokens=3).stream(QUESTION))
    final = events[-1]
    assert final.text == text
    drafts = [c.text for e in events if isinstance(e, RoundEvent) for c in e.candidates]
    assert not any("\ufffd" in draft for draft in drafts)


def test_settings_per_answer_are_checked():
    ensemble = fake_ensemble(*trio())
    with pytest.raises(SpecemError, match="did you mean 'temperature'"):
        ensemble.stream(QUESTION, temprature=0.5)
    with pytest.raises(SpecemError, match="threads_per_model is read when the models load"):
        ensemble.stream(QUESTION, threads_per_model=4)
    with pytest.raises(SpecemError, match="top_p must be in"):
        ensemble.stream(QUESTION, top_p=0)
    with pytest.raises(SpecemError, match="stop must be an array of strings"):
        EnsembleSettings(stop="END")
    assert ensemble.settings == EnsembleSettings(greedy=True, reasoning_budget=0)


def test_a_winner_that_model_exit_removes_in_its_own_round_is_still_committed(monkeypatch):
    """Model exit judges cumulative shares, so the round's winner can be the drafter that
    leaves in that round; its segment must still reach every model that followed the round."""
    from specem_local.engine import feedback

    def keep_only_the_last(shares, active, rounds, warmup, exit_share):
        return active[:-1] if rounds >= 1 else []

    monkeypatch.setattr(feedback, "exiting_drafters", keep_only_the_last)
    ensemble = fake_ensemble(*trio(), segment_tokens=4, model_exit=True)
    _, rounds, final = split(list(ensemble.stream(QUESTION)))
    assert rounds[0].author != "small" and rounds[1].drafters == ("small",)
    assert final.text.startswith(rounds[0].text) and final.finish_reason in ("eos", "length")


def test_a_conversation_that_leaves_no_room_for_a_round_is_refused_before_it_starts():
    members = trio(n_ctx=90)
    ensemble = fake_ensemble(*members, segment_tokens=10)
    with pytest.raises(SpecemError, match=r"leaves no room to answer .* \(a round needs 31\); raise n_ctx"):
        ensemble.generate("a long question " * 3)
    assert ensemble.generate("Hi?").text  # a short one still fits


def test_segment_tokens_larger_than_the_context_says_so():
    ensemble = fake_ensemble(*trio(), segment_tokens=4000)
    with pytest.raises(SpecemError, match="segment_tokens = 4000 does not fit the context of big"):
        ensemble.generate(QUESTION)
