import pytest

from specem_local.scoring_text import (
    extract_choice,
    extract_number,
    mcnemar_exact_p,
    numbers_equal,
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
