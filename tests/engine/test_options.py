"""Answers chosen from options (issue 56): which schemas are choices, and the numbers of the mix
(beliefs, label-prior correction, the weighted mix, weights fitted from labelled items)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from specem_local.engine import options as opt
from specem_local.engine.prompting import Message
from specem_local.engine.task_weights import fit_task, guessed_at_least


@pytest.mark.parametrize(
    ("schema", "values"),
    [
        ({"enum": ["positive", "negative"]}, ("positive", "negative")),
        ({"type": "string", "enum": ["a", "b", "c"]}, ("a", "b", "c")),
        ({"anyOf": [{"const": "yes"}, {"const": "no", "title": "No"}]}, ("yes", "no")),
        ({"oneOf": [{"const": 1, "type": "integer"}, {"const": 2}]}, (1, 2)),
        ({"type": "boolean"}, (True, False)),
        ({"enum": ["x", None], "title": "t", "description": "d"}, ("x", None)),
        ({"type": ["string", "null"], "enum": ["x", None]}, ("x", None)),
        ({"enum": ["a", "b"], "default": "a", "examples": ["b"], "$id": "x"}, ("a", "b")),
    ],
)
def test_a_schema_of_a_few_values_is_a_choice_among_them(schema, values):
    found = opt.options_in(schema)
    assert found is not None and found.values == values
    assert found.texts == tuple(json.dumps(v) for v in values)


@pytest.mark.parametrize(
    "schema",
    [
        {"enum": ["only"]},  # one value: nothing to choose
        {"enum": ["a", "a"]},  # the same twice
        {"enum": [1, 1.0]},  # 1 and 1.0: not ours to tell apart
        {"enum": [{"a": 1}, {"b": 2}]},  # objects are written in rounds
        {"enum": [str(i) for i in range(21)]},  # past MAX_OPTIONS
        {"type": "integer", "enum": ["1", "2"]},  # a type that disagrees
        {"enum": ["a", "b"], "minLength": 1},  # another keyword beside the enum
        {"anyOf": [{"const": "a"}, {"type": "string"}]},  # a branch that is not a const
        {"anyOf": [{"const": "a", "pattern": "a"}, {"const": "b"}]},
        {"type": "string"},
        {"type": "boolean", "enum": [True]},
        {"enum": ["a", " a"]},  # the same words once stripped
        {"enum": ["a", " "]},  # an option of no words
        "not a schema",
    ],
)
def test_any_other_schema_is_no_choice(schema):
    assert opt.options_in(schema) is None


def test_a_string_reads_as_its_words_and_anything_else_as_its_json():
    found = opt.options_in({"enum": ["left", 3, True, None]})
    assert found is not None
    assert found.words == ("left", "3", "true", "null") and found.texts == ('"left"', "3", "true", "null")
    assert found.key == '["\\"left\\"", "3", "true", "null"]'


def test_sources_are_named_by_way_and_member_and_split_back():
    assert opt.source("qwen:0.5b", "asked") == "asked:qwen:0.5b"
    assert opt.split_source("asked:qwen:0.5b") == ("qwen:0.5b", "asked")


def test_the_plain_text_is_each_message_then_the_cue():
    messages = [Message("system", "Be brief."), Message("user", " Is it good? "), Message("tool", "x", name="f"),
                Message("assistant", "Which one?"), Message("user", "The first.")]  # fmt: skip
    assert opt.plain_text(messages) == "Be brief.\n\nIs it good?\n\nWhich one?\n\nThe first.\nAnswer:"


def test_a_belief_is_the_softmax_of_the_summed_log_probabilities():
    belief = opt.distribution([np.log(0.2), np.log(0.6)])
    assert belief == pytest.approx([0.25, 0.75])
    assert opt.distribution([-1000.0, -1001.0]) == pytest.approx([1 / (1 + np.exp(-1)), 1 - 1 / (1 + np.exp(-1))])


def test_the_label_prior_is_divided_out():
    lean = np.array([0.9, 0.1])
    assert opt.corrected(lean, lean) == pytest.approx([0.5, 0.5])  # it says only what it always says
    total = 0.6 / 0.9 + 0.4 / 0.1
    assert opt.corrected(np.array([0.6, 0.4]), lean) == pytest.approx([0.6 / 0.9 / total, 4 / total])
    assert opt.corrected(lean, None) is lean
    assert np.isfinite(opt.corrected(lean, np.array([0.0, 1.0]))).all()  # a zero prior is floored


def test_the_mix_weighs_each_source_and_counts_equally_without_weights():
    beliefs = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}
    assert opt.mixed(beliefs, {"a": 3.0, "b": 1.0}) == pytest.approx([0.75, 0.25])
    assert opt.mixed(beliefs, {"a": 3.0}) == pytest.approx([1.0, 0.0])  # b has no weight
    assert opt.mixed(beliefs, {}) == pytest.approx([0.5, 0.5])
    assert opt.mixed(beliefs, {"a": -1.0, "b": 0.0}) == pytest.approx([0.5, 0.5])


def test_a_mean_prior_is_how_often_a_source_leans_to_each_option():
    assert opt.mean_prior([np.array([0.8, 0.2]), np.array([0.6, 0.4])]) == pytest.approx([0.7, 0.3])


def test_fitted_weights_find_the_source_that_knows_and_few_items_stay_near_uniform():
    rng = np.random.default_rng(0)
    answers = list(rng.integers(0, 2, 200))
    knows = [np.array([0.9, 0.1]) if a == 0 else np.array([0.1, 0.9]) for a in answers]
    guesses = [np.array([0.5, 0.5]) for _ in answers]
    wrong = [np.array([0.2, 0.8]) if a == 0 else np.array([0.8, 0.2]) for a in answers]
    items = [{"knows": k, "guesses": g, "wrong": w} for k, g, w in zip(knows, guesses, wrong)]
    fitted = opt.fitted_weights(items, answers)
    assert fitted["knows"] > 0.9 and fitted["wrong"] < 0.02 and sum(fitted.values()) == pytest.approx(1.0)
    few = opt.fitted_weights(items[:2], answers[:2], smoothing=5.0)
    assert max(few.values()) < 0.5 and few["knows"] > few["guesses"] > few["wrong"]


def test_fitted_weights_maximise_the_likelihood_of_the_right_answers():
    items = [
        {"a": np.array([0.7, 0.3]), "b": np.array([0.4, 0.6])},
        {"a": np.array([0.2, 0.8]), "b": np.array([0.5, 0.5])},
    ]
    answers = [0, 0]
    fitted = opt.fitted_weights(items, answers, smoothing=0.0)

    def likelihood(w: float) -> float:
        return float(sum(np.log(w * i["a"][y] + (1 - w) * i["b"][y]) for i, y in zip(items, answers)))

    grid = max(np.linspace(0, 1, 1001), key=likelihood)
    assert fitted["a"] == pytest.approx(grid, abs=2e-3)


def test_label_frequencies_tilt_a_corrected_belief_and_believed_applies_a_tasks_priors():
    lean = np.array([0.9, 0.1])
    assert opt.corrected(lean, lean, np.array([0.7, 0.3])) == pytest.approx([0.7, 0.3])
    assert opt.corrected(lean, None, np.array([0.7, 0.3])) is lean  # no prior of its own: as it is
    scores = {"asked:a": [np.log(0.9), np.log(0.1)], "scored:a": [np.log(0.5), np.log(0.5)]}
    found = opt.believed(scores, {"asked:a": lean, opt.LABELS: np.array([0.25, 0.75])})
    assert found["asked:a"] == pytest.approx([0.25, 0.75]) and found["scored:a"] == pytest.approx([0.5, 0.5])


def test_a_tasks_fit_keeps_priors_by_its_options_or_by_position_and_label_frequencies_only_when_asked():
    yes_no = opt.options_in({"enum": ["yes", "no"]})
    three = opt.options_in({"enum": ["a", "b", "c"]})
    assert yes_no is not None and three is not None
    leaning = {"asked:m": [np.log(0.8), np.log(0.2)], "scored:m": [np.log(0.5), np.log(0.5)]}
    same = fit_task("t", [leaning] * 4, [yes_no] * 4, [0, 0, 0, 1], "four items")
    assert set(same.priors) == {yes_no.key} and opt.LABELS not in same.priors[yes_no.key]
    assert same.priors[yes_no.key]["asked:m"] == pytest.approx([0.8, 0.2]) and same.items == 4
    assert set(same.weights) == {"asked:m", "scored:m"} and same.fitted_on == "four items"
    with_labels = fit_task("t", [leaning] * 4, [yes_no] * 4, [0, 0, 0, 1], "", labels=True)
    assert with_labels.priors[yes_no.key][opt.LABELS] == pytest.approx([4 / 6, 2 / 6])
    flat = {"asked:m": [0.0, 0.0, 0.0], "scored:m": [0.0, 0.0, 0.0]}
    mixed = fit_task("t", [leaning, flat], [yes_no, three], [0, 2], "")
    assert set(mixed.priors) == {"#2", "#3"}
    assert fit_task("t", [leaning] * 4, [yes_no] * 4, [0, 0, 0, 1], "", priors=False).priors == {}


def test_how_likely_guessing_gets_as_many_right_is_exact():
    assert guessed_at_least(0, [2, 3]) == 1.0
    assert guessed_at_least(0, [3, 3]) == 1.0  # its terms sum to 1 + 2e-16 in floating point: a probability still
    assert guessed_at_least(1, [2]) == pytest.approx(0.5)
    assert guessed_at_least(3, [2, 2, 2]) == pytest.approx(0.125)
    assert guessed_at_least(2, [2, 4]) == pytest.approx(0.5 * 0.25)
    assert guessed_at_least(1, [2, 4]) == pytest.approx(1 - 0.5 * 0.75)
    assert guessed_at_least(3, [2, 2]) == 0.0  # more than there are items
    binomial = sum(math.comb(300, k) * 0.25**k * 0.75 ** (300 - k) for k in range(83, 301))
    assert guessed_at_least(83, [4] * 300) == pytest.approx(binomial)  # ARC-Challenge's best on train: 0.159
