"""How sure an answer is (issue 55), as plain functions and on fake members: each round's
evidence from its author's token probabilities and the vote, the answer's aggregated over its
rounds, a logistic calibrator fitted on labelled answers, and the confidence every answer
carries (``FinalEvent.confidence``; ``abstain_below`` marks it unsure, never changes it)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from specem_local.engine.drafted import Draft
from specem_local.engine.evidence import (
    FEATURES,
    Calibrator,
    RoundEvidence,
    answer_confidence,
    answer_evidence,
    fit,
    round_sureness,
    token_logprobs,
    vote_evidence,
)
from specem_local.events import FinalEvent, RoundEvent, event_from_dict
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member
from tests.engine.test_places import echo


def test_token_logprobs_are_each_tokens_log_softmax_in_the_row_that_predicted_it():
    rows = [np.array([0.0, math.log(3.0)]), np.array([math.log(4.0), 0.0])]
    normalisers = np.array([math.log(4.0), math.log(5.0)])
    assert token_logprobs(rows, [1, 1], normalisers) == pytest.approx((math.log(0.75), math.log(0.2)))
    assert token_logprobs([np.array([-1e9, 0.0])], [0], np.array([0.0])) == (-20.0,)  # floored


def test_a_voted_rounds_margin_and_agreement():
    combined = np.array([0.6, 0.3, 0.1])
    shares = np.array([[0.7, 0.2, 0.1], [0.3, 0.6, 0.1], [np.nan, np.nan, np.nan]])
    margin, agreement = vote_evidence(combined, shares, 0, 1, ranked_first_by=(0,))
    assert margin == pytest.approx(0.3) and agreement == pytest.approx(0.5)  # two verifiers scored it, one first
    assert vote_evidence(None, shares, 0, None, ()) == (None, None)
    assert vote_evidence(combined, shares, 0, None, (0, 1))[0] is None  # no runner-up: no margin


def test_an_answers_evidence_takes_its_weakest_token_and_its_weakest_vote():
    rounds = [
        RoundEvidence((-0.1, -0.2), 0.4, 1.0),
        RoundEvidence((-3.0,), None, None),
        RoundEvidence((-0.05,), 0.1, 0.5),
    ]
    evidence = answer_evidence(rounds, ended=True, tokens=4)
    assert evidence["least_logprob"] == -3.0 and evidence["least_margin"] == 0.1
    assert evidence["mean_logprob"] == pytest.approx((-0.1 - 0.2 - 3.0 - 0.05) / 4)
    assert evidence["mean_agreement"] == 0.75 and evidence["voted"] == pytest.approx(2 / 3)
    assert evidence["ended"] == 1.0 and evidence["log_tokens"] == pytest.approx(math.log(5))
    empty = answer_evidence([], ended=False, tokens=0)
    assert math.isnan(empty["least_logprob"]) and empty["voted"] == 0.0 and empty["ended"] == 0.0


def test_a_fitted_calibrator_ranks_and_calibrates_the_answers_it_learned_from():
    generator = random.Random(0)
    evidence, right = [], []
    for _ in range(400):
        mean = generator.uniform(-2.0, 0.0)
        p = 1 / (1 + math.exp(-(3 * mean + 3)))
        evidence.append({"mean_logprob": mean, "least_logprob": mean * 3, "ended": 1.0})
        right.append(generator.random() < p)
    calibrator = fit(evidence, right, "simulated")
    predicted = [calibrator.probability(e) for e in evidence]
    assert abs(sum(predicted) - sum(right)) < 8  # calibrated in the large
    assert calibrator.probability({"mean_logprob": -0.1, "least_logprob": -0.3, "ended": 1}) > 0.8
    assert calibrator.probability({"mean_logprob": -1.9, "least_logprob": -5.7, "ended": 1}) < 0.3
    again = Calibrator.from_dict(calibrator.to_dict())
    assert again == calibrator and len(again.weights) == len(FEATURES)
    with pytest.raises(ValueError, match="both right and wrong"):
        fit(evidence[:3], [True] * 3, "one class")
    some = [{**e, "witnesses": 0.25 if i % 2 else 0.75} if i < 4 else e for i, e in enumerate(evidence)]
    assert fit(some, right, "some checked").fill[FEATURES.index("witnesses")] == pytest.approx(0.5)


def test_a_missing_feature_takes_its_fitted_fill():
    calibrator = Calibrator((1.0, *([0.0] * (len(FEATURES) - 1))), 0.0, (-2.0, *([0.0] * (len(FEATURES) - 1))), "x")
    assert calibrator.probability({}) == pytest.approx(1 / (1 + math.exp(2.0)))
    assert calibrator.probability({"least_logprob": math.nan}) == calibrator.probability({})


def test_every_answer_and_round_says_how_sure_it_is_and_abstain_below_marks_it_unsure():
    with fake_ensemble(echo("a", 1, n_params=3000), echo("b", 1), max_tokens=40) as ensemble:
        events = list(ensemble.stream(QUESTION))
        final = events[-1]
        assert isinstance(final, FinalEvent) and final.confidence is not None and 0 < final.confidence < 1
        assert final.confidence_from and not final.unsure
        assert set(final.evidence) <= set(FEATURES) and "mean_logprob" in final.evidence
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        assert all(r.sure is not None and 0 < r.least_probability <= 1 for r in rounds if r.author)
        assert any(r.margin is not None and r.agreement is not None for r in rounds)  # the fakes disagree: voted
        assert event_from_dict(final.to_dict()).confidence == final.confidence
        unsure = ensemble.generate(QUESTION, abstain_below=0.999)
        assert unsure.unsure and unsure.text == final.text  # marked, never changed


def test_logprobs_give_each_committed_token_with_its_alternatives_in_the_authors_distribution():
    member = fake_member("a", "Paris is the capital.")
    with fake_ensemble(member, max_tokens=60) as ensemble:
        events = list(ensemble.stream(QUESTION, logprobs=2))
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        tokens = [t for r in rounds for t in r.logprobs]
        assert "".join(t.token for t in tokens) == events[-1].text == "Paris is the capital."
        assert all(len(t.top) == 2 and t.top[0][1] >= t.top[1][1] and t.logprob <= 0 for t in tokens)
        assert all(t.top[0][:2] == (t.token, t.logprob) for t in tokens)  # greedy: the chosen token is the likeliest
        assert bytes(b for t in tokens for b in t.bytes).decode() == events[-1].text
        again = event_from_dict(rounds[0].to_dict())
        assert again.logprobs == rounds[0].logprobs
        older = rounds[0].to_dict()  # a record kept before alternatives had their bytes
        older["logprobs"][0]["top"] = [["P", -0.5]]
        assert event_from_dict(older).logprobs[0].top == (("P", -0.5, (80,)),)
        plain = [e for e in ensemble.stream(QUESTION) if isinstance(e, RoundEvent)]
        assert all(r.logprobs == () for r in plain)  # not asked: none


def test_a_paid_check_has_the_other_members_answer_alone_and_counts_who_agrees():
    from specem_local.engine.evidence import final_answer

    assert final_answer("so it is 1,000.") == final_answer("The answer is 1000") != final_answer("999")
    assert final_answer('{"b": 1, "a": 2}') == final_answer('{"a": 2, "b": 1}')
    assert final_answer("Yes\n\n  It  is PARIS ") == "it is paris" and final_answer("  ") is None
    assert final_answer("", {"b": 1, "a": [2]}) == final_answer("x", {"a": [2], "b": 1}) == '{"a": [2], "b": 1}'
    agreeing = [
        fake_member("a", "It is 42.", n_params=3000),
        fake_member("b", "So 42."),
        fake_member("c", "I think 7."),
    ]
    with fake_ensemble(*agreeing, max_tokens=40) as ensemble:
        free = ensemble.generate(QUESTION)
        checked = ensemble.generate(QUESTION, confidence_check="witnesses")
        assert "witnesses" not in free.evidence and checked.evidence["witnesses"] == 0.5  # b agrees, c does not
        assert checked.text == free.text and checked.seconds > 0
        sampled = ensemble.generate(QUESTION, confidence_check="samples", check_samples=2)
        assert sampled.evidence["witnesses"] == 1.0  # the heaviest member, sampled twice, says 42 again
        cancelled = ensemble.stream(QUESTION, confidence_check="witnesses")
        cancelled.cancel()
        assert cancelled.final().evidence == {}  # nothing written: nothing checked


def test_calibrate_confidence_fits_on_the_users_items_and_the_next_answer_reads_it(tmp_path, capsys, monkeypatch):
    from specem_local.commands.cli import main
    from specem_local.engine import Ensemble

    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path / "data"))
    members = [fake_member("a", "It is 42.", n_params=3000), fake_member("b", "So 42.")]
    monkeypatch.setattr(Ensemble, "from_config", classmethod(lambda cls, config=None, **_: fake_ensemble(*members)))
    items = tmp_path / "items.jsonl"
    items.write_text(
        "".join(json.dumps({"question": f"Q{i}?", "answer": "42" if i % 2 else "7"}) + "\n" for i in range(6))
    )
    assert main(["calibrate", str(items), "--confidence"]) == 0
    said = capsys.readouterr().out
    assert "confidence calibrated on 6 items" in said and "(3 right)" in said and "check 'none'" in said
    assert (tmp_path / "data" / "confidence.json").exists()
    with fake_ensemble(*[fake_member("a", "It is 42.", n_params=3000), fake_member("b", "So 42.")]) as ensemble:
        final = ensemble.generate(QUESTION)
    assert final.confidence_from == "6 of your items (items.jsonl)" and final.confidence == pytest.approx(0.5, abs=0.05)


def test_a_check_with_no_calibrator_of_its_own_reads_the_members_own_not_the_general_one(tmp_path, monkeypatch):
    """The members' calibrator fitted with the check comes first; without one, theirs fitted
    without it (a paid check must never leave them with the general prior); other members get
    the general one."""
    from specem_local.engine import learned
    from specem_local.engine.evidence import Calibrator
    from specem_local.engine.learned import confidence_calibrator, keep_calibrator, key_of

    monkeypatch.setenv("SPECEM_DATA_DIR", str(tmp_path))
    members = [fake_member("a", "It is 42."), fake_member("b", "So 42.")]
    general = confidence_calibrator(members, "samples")
    assert general.fitted_on.startswith("not fitted")
    zero = (0.0,) * len(general.weights)
    fitted = {c: Calibrator(zero, 0.0, general.fill, f"mine, {c}") for c in ("none", "samples")}
    keep_calibrator(members, "none", fitted["none"])
    assert [confidence_calibrator(members, c).fitted_on for c in ("none", "samples", "witnesses")] == ["mine, none"] * 3
    keep_calibrator(members, "samples", fitted["samples"])
    assert confidence_calibrator(members, "samples").fitted_on == "mine, samples"
    assert confidence_calibrator(members, "witnesses").fitted_on == "mine, none"
    others = [fake_member("c", "7.")]
    assert key_of(others) != key_of(members) and confidence_calibrator(others, "samples") == general
    shipped = {**learned._shipped_calibrators(), (key_of(others), "samples"): fitted["samples"]}
    keep_calibrator(others, "none", fitted["none"])
    monkeypatch.setattr(learned, "_shipped_calibrators", lambda: shipped)
    assert confidence_calibrator(others, "samples") is fitted["samples"]  # shipped with the check, before yours without
    assert confidence_calibrator(others, "witnesses").fitted_on == "mine, none"


def test_an_unsure_answer_is_answered_again_by_the_reserve_member_alone():
    members = [fake_member("a", "It is 42.", n_params=3000), fake_member("b", "So 42.")]
    reserve = fake_member("big", "Surely 41.", role="reserve", n_params=9000)
    with fake_ensemble(*members, reserve, max_tokens=40) as ensemble:
        assert ensemble.model_names == ["a", "b"] and [m.name for m in ensemble.reserve] == ["big"]
        sure = ensemble.generate(QUESTION, escalate_below=0.0001)
        assert sure.escalated == "" and sure.text == "It is 42." and "big" not in sure.wins
        unsure = ensemble.generate(QUESTION, escalate_below=0.9999)
        assert unsure.escalated == "big" and unsure.text == "Surely 41." and unsure.ensemble_text == "It is 42."
        assert unsure.wins["big"] > 0 and unsure.seconds >= sure.seconds * 0.5
        assert ensemble.generate(QUESTION).escalated == ""  # the setting is off by default


def test_a_fitted_calibrator_reads_evidence_outside_what_it_saw_at_the_edge_and_is_never_surer_than_its_count():
    generator = random.Random(1)
    evidence = [{"mean_logprob": generator.uniform(-1.0, -0.2), "ended": 1.0} for _ in range(60)]
    right = [e["mean_logprob"] > -0.6 for e in evidence]
    calibrator = fit(evidence, right, "separable")
    seen = max(e["mean_logprob"] for e in evidence)
    assert calibrator.answers == 60 and calibrator.high is not None
    assert calibrator.probability({"mean_logprob": 0.0, "ended": 1.0}) == calibrator.probability(
        {"mean_logprob": seen, "ended": 1.0}
    )
    assert calibrator.probability({"mean_logprob": -0.01, "ended": 1.0}) == pytest.approx(61 / 62)
    assert calibrator.probability({"mean_logprob": -3.0, "ended": 1.0}) == pytest.approx(1 / 62)
    edges = Calibrator(calibrator.weights, calibrator.intercept, calibrator.fill, "", calibrator.low, calibrator.high)
    at_edge = edges.probability({"mean_logprob": seen, "ended": 1.0})
    assert edges.probability({"mean_logprob": 5.0, "ended": 1.0}) == at_edge > 61 / 62
    unbounded = Calibrator(calibrator.weights, calibrator.intercept, calibrator.fill, "a prior")
    assert unbounded.probability({"mean_logprob": -0.01, "ended": 1.0}) > 61 / 62
    assert Calibrator.from_dict(unbounded.to_dict()) == unbounded and "low" not in unbounded.to_dict()
    assert Calibrator.from_dict(calibrator.to_dict()) == calibrator


class Reading:
    """A calibrator that reads every evidence as ``sure`` and keeps what it was given."""

    fitted_on = "a reading for the test"

    def __init__(self, sure: float) -> None:
        self.sure, self.read = sure, []

    def probability(self, evidence):
        self.read.append(dict(evidence))
        return self.sure


def test_an_answers_confidence_needs_a_calibrator_and_is_unsure_only_below_the_threshold():
    rounds = [RoundEvidence((-0.5, -1.5), 0.4, 1.0)]
    assert answer_confidence(None, rounds, True, 2, 0.9) == {}
    reading = Reading(0.5)
    said = answer_confidence(reading, rounds, True, 2, 0.5)
    assert said["confidence"] == 0.5 and said["unsure"] is False and said["confidence_from"] == Reading.fitted_on
    assert reading.read[0]["ended"] == 1.0 and said["evidence"]["ended"] == 1.0 and "witnesses" not in said["evidence"]
    assert answer_confidence(reading, rounds, False, 2, 0.6)["unsure"] is True
    assert reading.read[-1]["ended"] == 0.0


def test_a_rounds_sureness_is_its_evidence_read_alone_as_an_ended_answer():
    draft = Draft("ab", False, [1, 2], [np.zeros(4), np.zeros(4), np.zeros(4)])
    reading = Reading(0.7)
    said = round_sureness(reading, RoundEvidence((-0.5, -1.5), 0.4, 0.5), draft, -1, bytes, 2)
    assert said == {"sure": 0.7, "least_probability": pytest.approx(math.exp(-1.5)), "margin": 0.4,
                    "agreement": 0.5, "logprobs": ()}  # fmt: skip
    assert reading.read[0]["ended"] == 1.0 and reading.read[0]["least_logprob"] == -1.5
    unspelt = RoundEvidence((), None, None)  # a segment not spelt by whole drafted tokens
    assert round_sureness(reading, unspelt, draft, -1, bytes, 2)["sure"] is None
    assert round_sureness(reading, unspelt, draft, -1, bytes, 2)["least_probability"] is None
    assert round_sureness(None, RoundEvidence((-0.5,)), draft, -1, bytes, 2)["sure"] is None


def test_calibrate_weighs_each_member_by_its_own_answers_and_refuses_what_it_cannot(tmp_path, capsys, monkeypatch):
    from specem_local.commands.cli import main
    from specem_local.engine import Ensemble
    from specem_local.engine.learned import key_of
    from specem_local.storage.weights import WeightStore

    store = WeightStore(tmp_path / "specem.db")
    made: list[list] = [[fake_member("a", "It is 42.", n_params=3000), fake_member("b", "So 7.")]]
    monkeypatch.setattr(
        Ensemble, "from_config", classmethod(lambda cls, config=None, **_: fake_ensemble(*made[-1], weight_store=store))
    )
    items = tmp_path / "items.jsonl"
    items.write_text(
        "".join(json.dumps({"question": f"Q{i}?", "answer": "42" if i < 4 else "7"}) + "\n" for i in range(6))
    )
    assert main(["calibrate", str(items)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"calibrated on 6 items of {items}"
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert rows["a"][0] == "4/6" and rows["b"][0] == "2/6"  # each member alone, graded
    assert float(rows["a"][2]) > float(rows["a"][1]) and float(rows["b"][2]) < float(rows["b"][1])
    kept = store.get(key_of(made[-1]))
    assert kept is not None and kept.calibrated_items == 6
    assert len(kept.anchor) == 2  # both members' weights, the anchor later answers decay back to
    made.append([fake_member("a", "It is 42.")])
    assert main(["calibrate", str(items)]) == 1
    assert capsys.readouterr().err.strip() == "specem: error: calibrate needs an ensemble of at least two models"
    made.append([fake_member("a", "It is 42."), fake_member("j", "7", role="verify")])
    assert main(["calibrate", str(items)]) == 1
    assert (
        "j only verifies, so it cannot answer alone; calibrate weighs members by their own answers"
        in capsys.readouterr().err
    )
