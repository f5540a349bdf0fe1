"""Grading answers and the statistics of accuracy (pure)."""

import pytest

from specem_local.labelled import extract_choice, extract_number, numbers_equal
from specem_research.stats import (
    majority_right,
    mcnemar_exact_p,
    paired_sign_flip_p,
    repeated_runs_interval,
    wilson_interval,
)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("She has 5 apples and buys 3 more, so 8.", 8),
        ("The answer is 1,234.", 1234),
        ("so the total is $45.00. The answer is $45.", 45),
        ("#### 72", 72),
        ("We get \\boxed{ 18 } in the end, not 20", 18),
        ("The answer is: **-3.5**", -3.5),
        ("The answer is 12. Check: 12 + 3 = 15", 12),
        ("no numbers here", None),
    ],
)
def test_extract_number(text, number):
    assert extract_number(text) == number


def test_numbers_equal():
    assert numbers_equal(45.0, "45") and numbers_equal(1234.0, "1,234")
    assert not numbers_equal(None, "3") and not numbers_equal(3.0, "4")


@pytest.mark.parametrize(
    ("text", "letter"),
    [("The answer is (C).", "C"), ("B) because...", "B"), ("I think a is wrong; D", "D"), ("none", None)],
)
def test_extract_choice(text, letter):
    assert extract_choice(text, 4) == letter


def test_wilson_interval():
    low, high = wilson_interval(30, 120)
    assert low == pytest.approx(0.180, abs=2e-3) and high == pytest.approx(0.335, abs=2e-3)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 0.0)


def test_mcnemar_exact_p():
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(3, 3) == 1.0
    assert mcnemar_exact_p(0, 5) == pytest.approx(2 / 32)  # 5 of 5 one way: 2 * (1/2)^5
    assert mcnemar_exact_p(1, 9) == pytest.approx(2 * 11 / 1024)
    assert mcnemar_exact_p(9, 1) == mcnemar_exact_p(1, 9)


@pytest.mark.parametrize(("ahead", "behind"), [(0, 0), (3, 3), (0, 5), (1, 9), (10, 3), (7, 0)])
def test_sign_flip_over_single_runs_is_mcnemar(ahead, behind):
    differences = [1] * ahead + [-1] * behind + [0] * 20
    assert paired_sign_flip_p(differences) == pytest.approx(mcnemar_exact_p(ahead, behind))


def test_sign_flip_weighs_items_by_their_summed_difference():
    # flips of ±2 ±1 ±1: totals 4, 2, 2, 0, 0, -2, -2, -4; six of eight are at least 2 from zero
    assert paired_sign_flip_p([2, 1, -1, 0]) == pytest.approx(6 / 8)
    assert paired_sign_flip_p([3, 3, 3]) == pytest.approx(2 / 8)
    assert paired_sign_flip_p([]) == 1.0


def test_repeated_runs_interval():
    one_run = [1] * 30 + [0] * 90
    assert repeated_runs_interval(one_run, 1) == pytest.approx(wilson_interval(30, 120))
    # runs that always agree carry no more information than one run of the items
    assert repeated_runs_interval([3] * 30 + [0] * 90, 3) == pytest.approx(wilson_interval(30, 120))
    # runs that disagree within items are worth more answers: narrower than one run
    scattered = repeated_runs_interval([1] * 90 + [0] * 30, 3)
    low, high = wilson_interval(30, 120)
    assert scattered[0] > low and scattered[1] < high
    assert repeated_runs_interval([0] * 40, 3) == pytest.approx(wilson_interval(0, 40))
    assert repeated_runs_interval([], 3) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("answers", "correct", "chance"),
    [
        (["18", "20", "18"], [True, False, True], 1.0),
        (["18", "20", "20"], [True, False, False], 0.0),
        (["3", "4", "5"], [False, True, False], 1 / 3),  # no majority: a random one of the three
        (["4", "3", "4", "3"], [True, False, True, False], 0.5),  # a tie of two
        ([None, None, "9"], [False, False, True], 1.0),  # a run without an answer does not vote
        ([None, None], [False, False], 0.0),
        ([], [], 0.0),
    ],
)
def test_majority_right(answers, correct, chance):
    assert majority_right(answers, correct) == pytest.approx(chance)
    # the order of the runs does not matter
    assert majority_right(answers[::-1], correct[::-1]) == pytest.approx(chance)
