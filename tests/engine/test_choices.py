"""The user's choices as labels (issue 27): the rewards of a pick, a thumb and a comparison, the
bounded step they make to the kept weights, undo, and where the weights say they came from."""

from __future__ import annotations

import math

import pytest

from specem_local.engine import Ensemble, choices, learned
from specem_local.settings import EnsembleSettings
from specem_local.storage.weights import StoredWeights, WeightStore
from tests.engine.test_carried_weights import trio


def test_rewards_of_each_kind_of_choice():
    assert choices.pick_rewards("small", "big") == {"small": 1.0, "big": 0.0}
    assert choices.pick_rewards("big", "big") == {}  # two samples of one member: nothing to learn
    assert choices.thumbs_rewards({"big": 3, "small": 1}, up=True) == {"big": 0.75, "small": 0.25}
    assert choices.thumbs_rewards({"big": 3, "small": 1}, up=False) == {"big": 0.25, "small": 0.75}
    assert choices.thumbs_rewards({"big": 4}, up=True) == {}  # a plain answer
    assert choices.best_rewards("mid", ["big", "mid", "small"], {}) == {"mid": 1.0, "big": 0.0, "small": 0.0}
    assert choices.best_rewards(choices.ENSEMBLE, ["big", "small"], {"big": 1, "small": 1}) == {
        "big": 0.5,
        "small": 0.5,
    }


def test_one_choice_moves_the_odds_by_at_most_the_rate_whatever_the_weights():
    step = choices.choice_change({"small": 1.0, "big": 0.0})
    assert step["small"] - step["big"] == pytest.approx(choices.CHOICE_RATE)
    assert sum(step.values()) == pytest.approx(0.0)
    assert choices.choice_change({"big": 1.0}) == {}


@pytest.fixture
def ensemble(tmp_path):
    store = WeightStore(tmp_path / "specem.db")
    with Ensemble(list(trio()), EnsembleSettings(greedy=True), weight_store=store) as ensemble:
        yield ensemble


def test_choices_move_the_starting_weights_are_counted_and_undone(ensemble):
    before = ensemble.starting_weights()
    assert ensemble.weights_origin() == "the prior"
    members, settings, store = ensemble.members, ensemble.settings, ensemble.weight_store
    for _ in range(2):
        learned.choose(store, members, settings, "pick", choices.pick_rewards("small", "big"))
    after = ensemble.starting_weights()
    odds = math.log(after["small"] / after["big"]) - math.log(before["small"] / before["big"])
    assert odds == pytest.approx(2 * choices.CHOICE_RATE)  # not drowned by big's larger weight
    assert after["mid"] / after["big"] == pytest.approx(before["mid"] / before["big"] * math.exp(choices.CHOICE_RATE))
    assert ensemble.weights_origin() == "the prior and 2 of your choices"
    start = next(iter(ensemble.stream("Six times seven?")))
    assert start.weights == pytest.approx(after) and start.weights_origin.endswith("2 of your choices")
    undone = learned.undo_choice(store, members)
    assert undone is not None and undone.undone and undone.kind == "pick"
    learned.undo_choice(store, members)
    assert ensemble.starting_weights() == pytest.approx(before)
    assert ensemble.weights_origin() == "the prior"
    assert learned.undo_choice(store, members) is None  # nothing left to undo
    assert [c.undone for c in store.choices()] == [True, True]


def test_a_choice_on_a_calibrated_ensemble_keeps_the_calibration_under_it(ensemble):
    members, settings, store = ensemble.members, ensemble.settings, ensemble.weight_store
    learned.calibrate(store, members, settings, {"big": 2, "mid": 5, "small": 9}, 10)
    calibrated = ensemble.starting_weights()
    learned.choose(store, members, settings, "thumbs-down", choices.thumbs_rewards({"big": 3, "small": 1}, up=False))
    assert ensemble.weights_origin() == "calibrated on 10 items and 1 of your choices"
    assert ensemble.starting_weights()["small"] > calibrated["small"]
    chosen = ensemble.starting_weights()
    assert ensemble.reset_weights() and ensemble.weights_origin() == "the prior"
    assert [c.undone for c in store.choices()] == [True, False]  # the choice is taken back; the reset kept
    assert learned.undo_choice(store, members).kind == "reset"  # which brings everything back (issue 36)
    assert ensemble.weights_origin() == "calibrated on 10 items and 1 of your choices"
    assert ensemble.starting_weights() == chosen
    assert learned.undo_choice(store, members).kind == "thumbs-down"
    assert ensemble.starting_weights() == pytest.approx(calibrated)
    assert learned.undo_choice(store, members) is None  # a calibration is not a choice


def test_choices_on_a_built_in_calibration_keep_saying_it_is_where_the_weights_began(ensemble, monkeypatch):
    """The first choice on an ensemble that has only its built-in calibration stores that base,
    and the next choice keeps it: the start says "built-in" after both, not "calibrated"."""
    members, settings, store = ensemble.members, ensemble.settings, ensemble.weight_store
    key = learned.key_of(members)
    logs = {learned.member_identity(m): 0.0 for m in members}
    built_in = StoredWeights(key, logs, logs, 0, 20, 0.0)
    monkeypatch.setattr(learned, "built_in_calibrations", lambda: {key: built_in})
    for kept in (1, 2):
        learned.choose(store, members, settings, "pick", choices.pick_rewards("small", "big"))
        record = store.get(key)
        assert record is not None and (record.base, record.choices) == ("built-in", kept)
        start = next(iter(ensemble.stream("Six times seven?")))
        assert start.weights_from == "built-in"
