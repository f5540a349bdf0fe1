"""Weights kept across answers, with fake models: a calibration every answer starts from, and
(with ``carry_weights``) the learning each answer hands on to the next."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

from specem_local.engine import Ensemble, feedback, learned
from specem_local.engine.learned import calibrate, key_of, member_identity
from specem_local.events import FinalEvent, StartEvent
from specem_local.settings import EnsembleSettings
from specem_local.storage.weights import StoredWeights, WeightStore
from tests.engine.conftest import QUESTION, fake_member

RIGHT = "The answer is 42, because six times seven is forty-two."


def trio():
    """Two members that agree (each judge prefers its own text, so the one both others reject
    loses reward), and one that does not."""
    return (
        fake_member("big", RIGHT, n_params=3000),
        fake_member("mid", RIGHT, n_params=1500, words=[" answer", " because", " seven"]),
        fake_member("small", "Seven, I guess.", n_params=500),
    )


def ensemble_with_store(tmp_path, members=None, **settings) -> Ensemble:
    """An ensemble with a weight store, carrying its weights over unless told otherwise, and
    without model exit (which stops the learning once the weak drafters leave) unless told."""
    store = WeightStore(tmp_path / "specem.db")
    settings = {"greedy": True, "carry_weights": True, "model_exit": False, **settings}
    return Ensemble(list(members or trio()), EnsembleSettings(**settings), weight_store=store)


def start_and_final(ensemble: Ensemble, **overrides) -> tuple[StartEvent, FinalEvent]:
    events = list(ensemble.stream(QUESTION, **overrides))
    return events[0], events[-1]


def test_the_next_answer_starts_where_the_last_one_ended(tmp_path):
    ensemble = ensemble_with_store(tmp_path)
    first_start, first_final = start_and_final(ensemble)
    assert first_start.weights_from == "prior" and first_start.weights == pytest.approx(
        {"big": 0.6, "mid": 0.3, "small": 0.1}
    )
    second_start, _ = start_and_final(ensemble)
    assert second_start.weights_from == "carried" and second_start.learned_answers == 1
    assert second_start.weights == pytest.approx(first_final.weights)  # Hedge, continued
    assert ensemble.starting_weights() != pytest.approx(second_start.weights)  # and it goes on learning


def test_the_member_the_others_reject_loses_weight_over_answers_without_labels(tmp_path):
    ensemble = ensemble_with_store(tmp_path)
    small = []
    for _ in range(20):
        start, _ = start_and_final(ensemble)
        small.append(start.weights["small"])
    assert start.learned_answers == 19 and small == sorted(small, reverse=True)
    assert small[-1] < 0.02 < small[0] == pytest.approx(0.1)


def test_fresh_weights_neither_reads_nor_writes_them(tmp_path):
    ensemble = ensemble_with_store(tmp_path)
    start_and_final(ensemble)
    carried = ensemble.starting_weights()
    start, _ = start_and_final(ensemble, fresh_weights=True)
    assert start.weights_from == "prior" and start.weights == pytest.approx({"big": 0.6, "mid": 0.3, "small": 0.1})
    assert ensemble.starting_weights() == pytest.approx(carried)


def test_the_weights_belong_to_the_set_of_members(tmp_path):
    ensemble = ensemble_with_store(tmp_path)
    start_and_final(ensemble)
    pair_start, _ = start_and_final(ensemble, models=["big", "small"])
    assert pair_start.weights_from == "prior"  # a different ensemble: big and small alone


def test_reset_goes_back_to_the_prior(tmp_path):
    ensemble = ensemble_with_store(tmp_path)
    start_and_final(ensemble)
    assert ensemble.reset_weights() and not ensemble.reset_weights()
    start, _ = start_and_final(ensemble)
    assert start.weights_from == "prior"


def test_without_a_store_every_answer_starts_from_the_prior():
    ensemble = Ensemble(list(trio()), EnsembleSettings(greedy=True))
    assert start_and_final(ensemble)[0].weights_from == "prior"
    assert start_and_final(ensemble)[0].weights_from == "prior"


def test_model_exit_leaves_out_a_member_known_to_lose_from_the_first_round(tmp_path):
    ensemble = ensemble_with_store(tmp_path, model_exit=True, exit_warmup_rounds=4)
    first, _ = start_and_final(ensemble)
    assert "small" in first.drafters
    for _ in range(5):
        start, final = start_and_final(ensemble)
    assert start.weights["small"] < 0.8 / 3 and "small" not in start.drafters
    assert final.drafters_per_round < 3


def test_carrying_decays_back_to_the_anchor():
    anchor = np.array([0.0, 0.0])
    log_weights = np.array([1.0, -1.0])
    kept = feedback.carried(log_weights, anchor, np.zeros(2), memory=4)
    np.testing.assert_allclose(kept, [0.75, -0.75])  # a quarter of the old learning is forgotten
    np.testing.assert_allclose(feedback.carried(log_weights, anchor, np.array([0.5, 0.0]), 1e9), [1.25, -1.25])


def test_calibration_is_hedge_over_the_labelled_items():
    prior = np.array([0.5, 0.25, 0.25])
    wrong = np.array([14.0, 19.0, 20.0])
    log_weights = feedback.calibration(prior, wrong, items=20)
    eta = np.sqrt(8 * np.log(3) / 20)
    expected = np.log(prior) - eta * wrong
    np.testing.assert_allclose(log_weights, expected - expected.mean())
    weights = feedback.from_log_weights(log_weights, np.ones(3, dtype=bool))
    assert weights[0] > 0.85


def test_by_default_answers_start_from_the_calibration_and_carry_nothing(tmp_path):
    ensemble = ensemble_with_store(tmp_path, carry_weights=False)
    start, _ = start_and_final(ensemble)
    assert start.weights_from == "prior" and ensemble.weight_store.all() == ([], [])  # nothing learned is kept
    calibrate(ensemble.weight_store, ensemble.members, ensemble.settings, {"big": 5, "mid": 12, "small": 20}, 20)
    first, _ = start_and_final(ensemble)
    second, _ = start_and_final(ensemble)
    assert first.weights_from == second.weights_from == "calibrated"
    assert first.weights == second.weights and second.learned_answers == 0


def test_carried_weights_go_on_from_a_calibration(tmp_path):
    ensemble = ensemble_with_store(tmp_path)
    calibrate(ensemble.weight_store, ensemble.members, ensemble.settings, {"big": 5, "mid": 12, "small": 20}, 20)
    start, _ = start_and_final(ensemble)
    assert start.weights_from == "calibrated" and start.calibrated_items == 20 and start.weights["big"] > 0.85
    after, _ = start_and_final(ensemble)
    assert after.weights_from == "calibrated" and after.learned_answers == 1
    record = ensemble.weight_store.get(key_of(ensemble.members))
    assert record.anchor != record.log_weights  # the answers' learning is on top of the calibration


def test_members_known_to_lose_cost_nothing_once_one_drafter_is_left(tmp_path):
    ensemble = ensemble_with_store(tmp_path, carry_weights=False, model_exit=True)
    calibrate(ensemble.weight_store, ensemble.members, ensemble.settings, {"big": 5, "mid": 18, "small": 20}, 20)
    start, final = start_and_final(ensemble)
    assert start.drafters == ("big",) and final.text == RIGHT and final.drafters_per_round == 1
    big, mid, small = ensemble.members
    assert big.model.decodes > 0 and mid.model.decodes == small.model.decodes == 0  # not even the prompt


def test_a_damaged_weights_database_costs_the_weights_not_the_answer(tmp_path):
    (tmp_path / "specem.db").write_bytes(b"not a database" * 200)
    ensemble = ensemble_with_store(tmp_path)
    with pytest.warns(UserWarning, match="cannot use the weights database"):
        assert ensemble.weights_origin() == "the prior"
    with pytest.warns(UserWarning):
        start, final = start_and_final(ensemble)
    assert start.weights_from == "prior" and final.text == RIGHT
    assert any("were not kept" in warning for warning in ensemble.warnings)


def test_a_built_in_calibration_applies_until_the_user_makes_one(tmp_path, monkeypatch):
    ensemble = ensemble_with_store(tmp_path, carry_weights=False, model_exit=True)
    shipped = {"big": 2.0, "mid": -0.5, "small": -1.5}
    record = StoredWeights(key_of(ensemble.members), {}, {}, 0, 20, 0.0)
    identities = {member_identity(m): shipped[m.name] for m in ensemble.members}
    monkeypatch.setattr(learned, "built_in_calibrations", lambda: {record.key: replace(record, anchor=identities)})
    start, final = start_and_final(ensemble)
    assert start.weights_from == "built-in" and start.weights_origin == "the built-in calibration (20 items)"
    assert start.drafters == ("big",) and final.text == RIGHT
    assert start_and_final(ensemble, fresh_weights=True)[0].weights_from == "prior"
    calibrate(ensemble.weight_store, ensemble.members, ensemble.settings, {"big": 20, "mid": 5, "small": 20}, 20)
    assert start_and_final(ensemble)[0].weights_from == "calibrated"  # the user's own comes first
    assert ensemble.reset_weights() and ensemble.weights_origin() == "the built-in calibration (20 items)"


def test_the_shipped_calibrations_are_for_the_built_in_ensembles():
    """Each names the members of a built-in ensemble (a renamed or re-quantised member is a
    different ensemble and starts from the prior) and puts most weight on its strongest."""
    from specem_local.models.config import builtin_ensembles, load_config

    keys = {" + ".join(sorted(m.name for m in load_config(ensemble=name).models)) for name in builtin_ensembles()}
    assert learned.built_in_calibrations()
    for key, record in learned.built_in_calibrations().items():
        assert " + ".join(learned.names_in(key)) in keys and record.calibrated_items >= 20
        assert max(learned.stored_weights(record).values()) > 0.85


def test_members_far_apart_in_size_get_advice_unless_calibrated(tmp_path):
    assert feedback.size_gap({"a": 3000, "b": 1500, "c": 500}) == ("a", "b", 2.0)
    assert feedback.size_gap({"a": 3000, "b": 1600}) is None and feedback.size_gap({"a": 3000}) is None
    ensemble = ensemble_with_store(tmp_path, carry_weights=False)  # big 3000, mid 1500, small 500
    assert ensemble.mix_advice().startswith("big has 2.0x the parameters of mid: ensembles gain most")
    calibrate(ensemble.weight_store, ensemble.members, ensemble.settings, {"big": 5, "mid": 12, "small": 20}, 20)
    assert ensemble.mix_advice() is None  # a calibration already tells it whom to follow


def test_a_damaged_weights_file_costs_the_learning_with_a_warning_not_the_answer(tmp_path):
    ensemble = ensemble_with_store(tmp_path)
    path = ensemble.weight_store.path
    ensemble.generate(QUESTION)
    data = bytearray(path.read_bytes())
    data[4096:12288] = b"\xab" * 8192  # the pages past the first: the weights table
    path.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        final = ensemble.generate(QUESTION)
    assert final.text == RIGHT
    assert any("starting from the prior weights" in w for w in ensemble.warnings)
    assert any("the weights this answer learned were not kept" in w for w in ensemble.warnings)
