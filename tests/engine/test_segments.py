import pytest

from specem_local.engine.segments import (
    copied_fraction,
    ends_at_word_boundary,
    find_stop,
    fitting_start,
    incomplete_utf8_tail,
    trim_to_word_boundary,
)


@pytest.mark.parametrize(
    ("data", "tail"),
    [
        (b"abc", 0),
        ("é".encode(), 0),
        ("é".encode()[:1], 1),
        ("日本".encode()[:-1], 2),
        ("日本".encode()[:-2], 1),
        ("🙂".encode()[:3], 3),
        ("🙂".encode(), 0),
        (b"", 0),
        (b"\x80", 0),  # a stray continuation byte can never be completed
    ],
)
def test_incomplete_utf8_tail(data, tail):
    assert incomplete_utf8_tail(data) == tail


@pytest.mark.parametrize(
    ("text", "trimmed"),
    [
        ("The answer is 4", "The answer is"),
        ("The answer is 42!", "The answer is 42!"),
        ("The answer is 42.", "The answer is"),  # maybe "42.5": a number is never cut
        ("It costs $1,", "It costs"),
        ("Step 1.", "Step"),
        ("Done.", "Done."),
        ("The answer is\n", "The answer is\n"),
        ("single", "single"),
        ("  lead", "  lead"),
        ("two  spaces", "two"),
        ("", ""),
        ("日本語です", "日本語です"),
    ],
)
def test_trim_to_word_boundary(text, trimmed):
    assert trim_to_word_boundary(text) == trimmed


@pytest.mark.parametrize(
    ("text", "following", "boundary"),
    [
        ("The answer is 4", b"2", False),  # "42" is one word
        ("The answer is 42", b" apples", True),  # the next token starts a word
        ("The answer is 42", b"\n", True),
        ("The answer is 42.", b"5", False),  # "42.5": never inside a number
        ("It costs $1,", b"500", False),
        ("The answer is 42.", b" Next", True),
        ("The answer is 42.", b"\n", True),
        ("Done.", b"5", True),  # a full stop after a word, not a decimal point
        ("snake", b"_case", False),
        ("caf", "\u00e9".encode(), False),  # a letter, even non-ASCII
        ("x", b"", False),
    ],
)
def test_ends_at_word_boundary(text, following, boundary):
    assert ends_at_word_boundary(text, following) is boundary


def test_find_stop_across_segment_boundary():
    assert find_stop("hello END there", ("END",)) == 6
    assert find_stop("hello", ("END",)) is None
    assert find_stop("abcEND", ("END", "cE"), search_from=1) == 2
    assert find_stop("xx", ("",)) is None


STEPS = "1. Add the money from the three families to the money from the fifteen families.\n"


def test_a_segment_that_only_repeats_the_answer_is_fully_copied():
    answer = STEPS + "2. Subtract the total from the goal.\n\n" + STEPS[: STEPS.index(" the fifteen")]
    assert copied_fraction(answer, " the fifteen families.") == 1.0


def test_new_text_and_short_restatements_are_not_copies():
    answer = STEPS + "2. Subtract the total from the goal."
    assert copied_fraction(answer, " So 150 - 105 = 45 dollars are left.") == 0.0
    # an 11-word phrase restated is normal in a worked answer; only a run of 12 counts
    assert copied_fraction(answer, " Then add the money from the three families to the money from") == 0.0


def test_only_the_words_past_twelve_repeated_ones_count():
    words = " ".join(f"w{i}" for i in range(20))
    answer = words + " x " + " ".join(f"w{i}" for i in range(10))
    # "w11" ends the 12-word run w0..w11, written before; "w10" ends a run of only 11
    assert copied_fraction(answer, " w10 w11 new") == 1 / 3


def test_a_candidate_that_finishes_the_last_word_is_joined_to_it():
    words = " ".join(f"w{i}" for i in range(14))
    answer = words + " " + " ".join(f"w{i}" for i in range(11)) + " w1"
    # "1" finishes "w1" into "w11", the 12th word of a repeated run
    assert copied_fraction(answer, "1 w12") == 1.0


def test_short_answers_have_nothing_to_copy():
    assert copied_fraction("", "anything at all") == 0.0
    assert copied_fraction("a b c", " a b c") == 0.0
    assert copied_fraction("a " * 30, "") == 0.0


def test_the_start_that_fits_is_found_in_as_few_tokenizations_as_halving_takes():
    calls: list[str] = []

    def characters(text: str) -> int:  # one token a character; a search that does not halve fails here, not hangs
        calls.append(text)
        assert len(calls) <= 12, "the search for the start that fits does not end"
        return len(text)

    assert fitting_start("x" * 1000, characters, 10) == "x" * 10 and len(calls) <= 12
    calls.clear()
    assert fitting_start("x" * 1000, characters, 999) == "x" * 999


def test_the_start_of_a_text_that_fits_is_the_longest():
    def words(text: str) -> int:
        return len(text.split())

    assert fitting_start("one two three", words, 3) == "one two three"
    assert fitting_start("one two three", words, 2) == "one two "
    assert fitting_start("one two three", words, 0) == ""
    assert fitting_start("", words, 0) == ""


def test_text_far_from_the_limit_is_not_tokenized_and_a_leading_token_is_counted_near_it():
    calls: list[str] = []

    def with_a_leading_space(text: str) -> int:  # as a tokenizer that adds a token for a leading space
        calls.append(text)
        return len(text.encode("utf-8")) + 1 if text else 0

    assert fitting_start("ab", with_a_leading_space, 3) == "ab" and calls == []  # 2 bytes < 3: not counted
    assert fitting_start("abc", with_a_leading_space, 3) == "ab" and calls  # 3 bytes are 4 tokens here
    calls.clear()
    assert fitting_start("é", with_a_leading_space, 2) == "" and calls  # two bytes, three tokens
