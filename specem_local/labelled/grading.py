"""Grading: reading the final answer out of a model's text (pure functions)."""

from __future__ import annotations

import math
import re

_NUMBER = r"-?\$?\d[\d,]*(?:\.\d+)?"
_FINAL_PATTERNS = (
    re.compile(r"####\s*(" + _NUMBER + ")"),
    re.compile(r"\\boxed\{\s*(" + _NUMBER + r")\s*\}"),
    re.compile(r"answer\s*(?:is|:|=)\s*\**\s*(" + _NUMBER + ")", re.IGNORECASE),
)


def normalise_number(text: str) -> float | None:
    cleaned = text.replace(",", "").replace("$", "").rstrip(".")
    try:
        return float(cleaned)
    except ValueError:
        return None


def extract_number(text: str) -> float | None:
    """The final numeric answer in a model's text: an explicit "#### N", "\\boxed{N}" or
    "the answer is N" (the last such), else the last number in the text."""
    for pattern in _FINAL_PATTERNS:
        matches = pattern.findall(text)
        if matches:
            return normalise_number(matches[-1])
    numbers = re.findall(_NUMBER, text)
    return normalise_number(numbers[-1]) if numbers else None


def numbers_equal(predicted: float | None, expected: str) -> bool:
    target = normalise_number(expected)
    return predicted is not None and target is not None and math.isclose(predicted, target, rel_tol=1e-6, abs_tol=1e-6)


def extract_choice(text: str, n_choices: int) -> str | None:
    """The chosen letter: "answer is (B)", "B)" or "B." at a line start, else the last lone
    capital letter among the choices."""
    letters = "ABCDEFGHIJ"[:n_choices]
    patterns = (
        rf"answer\s*(?:is|:)\s*\(?([{letters}])\b",
        rf"^\s*\(?([{letters}])[\).:]",
        rf"\b([{letters}])\b",
    )
    for pattern in patterns:
        flags = re.MULTILINE | (re.IGNORECASE if pattern.startswith("answer") else 0)
        matches = re.findall(pattern, text, flags=flags)
        if matches:
            return matches[-1].upper()
    return None
