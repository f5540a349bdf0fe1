import pytest

from specem_local.text import ends_at_word_boundary, find_stop, incomplete_utf8_tail, trim_to_word_boundary


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
        ("The answer is 42.", "The answer is 42."),
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
        ("The answer is 42.", b"5", True),  # already ends outside a word
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
