"""Drafted segments as text: UTF-8 and word boundaries, stop strings, repeats (pure functions)."""

from __future__ import annotations

from collections.abc import Callable


def incomplete_utf8_tail(data: bytes) -> int:
    """How many bytes at the end of ``data`` begin a UTF-8 character that is not finished.

    0 when ``data`` ends on a character boundary. Malformed bytes are not "incomplete": a
    byte that can never be completed counts as finished (it will be replaced on decode).
    """
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0b1100_0000 == 0b1000_0000:  # continuation byte: keep looking back
            continue
        if byte & 0b1000_0000 == 0:  # ASCII
            return 0
        need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
        return back if back < need else 0
    return 0


def _is_word_character(character: str) -> bool:
    return character.isalnum() or character == "_"


def _ends_in_number_mark(text: str) -> bool:
    """``text`` ends in a digit and a decimal point or thousands comma ("3." of "3.5", "1," of
    "1,500"): a cut there would let another model finish the number."""
    return len(text) >= 2 and text[-1] in ".," and text[-2].isdigit()


def ends_at_word_boundary(text: str, following: bytes) -> bool:
    """Whether a segment may stop after ``text`` when the model's next token is ``following``:
    ``text`` ends in something other than a word character, or the next token starts with
    whitespace (tokenizers attach a space to the word after it, so the cut goes before it).
    Never inside a number: "3." followed by "5" goes on."""
    if text and not _is_word_character(text[-1]):
        return not (_ends_in_number_mark(text) and following[:1].isdigit())
    return following[:1].isspace()


def trim_to_word_boundary(text: str) -> str:
    """Cut a draft that stops inside a word back to before its last whitespace run.

    "The answer is 4" -> "The answer is" (the next round may continue "42"). The cut goes
    before the whitespace because tokenizers attach a space to the word after it. A draft
    that ends in whitespace or punctuation is kept, unless the punctuation may be inside a
    number ("costs 1," may go on "500"); so is one that would become empty.
    """
    if not text or not (_is_word_character(text[-1]) or _ends_in_number_mark(text)):
        return text
    cut = len(text)
    while cut > 0 and not text[cut - 1].isspace():
        cut -= 1
    if cut == 0:
        return text
    while cut > 0 and text[cut - 1].isspace():
        cut -= 1
    return text[:cut] if cut > 0 else text


def find_stop(text: str, stops: tuple[str, ...], search_from: int = 0) -> int | None:
    """Index of the earliest stop string in ``text`` starting at or after ``search_from``
    (pass the previous length minus the longest stop, so stops across segments are found)."""
    hits = [index for stop in stops if stop and (index := text.find(stop, max(0, search_from))) >= 0]
    return min(hits) if hits else None


def fitting_start(text: str, tokens: Callable[[str], int], room: int) -> str:
    """The longest start of ``text`` that is at most ``room`` tokens long (``tokens``: a text's
    length in the tokenizer that counts it longest): forced text cut where ``max_tokens`` ends.
    Text shorter in UTF-8 bytes than ``room`` fits uncounted (a token holds a byte at least, and a
    tokenizer may add one for a leading space), so a round far from the limit tokenizes nothing."""
    if len(text.encode("utf-8")) < room or tokens(text) <= room:
        return text
    low, high = 0, len(text)  # the start of length low fits, the one of length high does not
    for _ in range(len(text).bit_length()):  # halving: as many steps as leave one length between them
        middle = (low + high) // 2
        low, high = (middle, high) if tokens(text[:middle]) <= room else (low, middle)
    return text[:low]


def copied_fraction(answer: str, candidate: str, span_words: int = 12) -> float:
    """Share of ``candidate``'s words that continue a verbatim copy of at least ``span_words``
    words of ``answer``: 0 for new text, 1 for a segment that only repeats what was written.

    Small models fall into loops that every member finds probable once begun (a copy is easy
    to predict), while restating a phrase is normal in worked answers. Only words past a
    12-word run count, and the vote is discounted in proportion, so a short restatement costs
    little and a long copy a lot (measured in README, Quality).
    """
    before = answer.split()
    words = candidate.split()
    if not words or len(before) < span_words:
        return 0.0
    sequence = (answer + candidate).split()  # the candidate's first word may finish the answer's last
    start = len(sequence) - len(words)
    seen = {tuple(before[i : i + span_words]) for i in range(len(before) - span_words + 1)}
    copied = sum(
        tuple(sequence[end - span_words + 1 : end + 1]) in seen
        for end in range(max(start, span_words - 1), len(sequence))
    )
    return copied / len(words)
