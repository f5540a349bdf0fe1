"""The statistics of accuracy: intervals, paired tests, votes over runs (pure functions)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence


def wilson_interval(successes: float, total: float, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a proportion (well-behaved at 0 and n)."""
    if total == 0:
        return (0.0, 0.0)
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_exact_p(only_first: int, only_second: int) -> float:
    """Two-sided exact McNemar test for two systems graded on the same items: the chance of a
    split at least this uneven among the items where exactly one of them is right, if each
    were equally likely to be the one (binomial with p = 1/2)."""
    discordant = only_first + only_second
    if discordant == 0:
        return 1.0
    tail = sum(math.comb(discordant, k) for k in range(min(only_first, only_second) + 1)) / 2**discordant
    return min(1.0, 2 * tail)


def paired_sign_flip_p(differences: Sequence[int]) -> float:
    """Two-sided exact test that two systems are equally good, from each item's difference in
    correct answers (this system's minus the other's) summed over repeated runs such as seeds.

    Items, not runs, are the unit: two runs of one question are not independent, so they are
    summed rather than counted as separate pairs. If the systems were equally good, each item's
    difference would be as likely negative as positive; the p-value is the share of the sign
    flips whose total is at least as far from zero as the observed one. With one run per item
    this is the exact McNemar test."""
    totals: Counter[int] = Counter({0: 1})
    for difference in differences:
        if difference:
            flipped: Counter[int] = Counter()
            for total, ways in totals.items():
                flipped[total + abs(difference)] += ways
                flipped[total - abs(difference)] += ways
            totals = flipped
    observed = abs(sum(differences))
    return min(1.0, sum(ways for total, ways in totals.items() if abs(total) >= observed) / sum(totals.values()))


def majority_right(answers: Sequence[str | None], correct: Sequence[bool]) -> float:
    """The chance that a majority vote over runs (self-consistency) picks a right answer:
    ``answers[i]`` is run i's extracted answer (None: no answer, no vote) and ``correct[i]``
    whether it was right. Ties are broken at random, so the result does not depend on the
    order of the runs: 1/k when the right answer is one of k answers tied for most votes."""
    counts = Counter(answer for answer in answers if answer is not None)
    if not counts:
        return 0.0
    most = max(counts.values())
    top = {answer for answer, count in counts.items() if count == most}
    right = {answer for answer, ok in zip(answers, correct) if ok and answer is not None}
    return len(top & right) / len(top)


def repeated_runs_interval(correct_per_item: Sequence[int], runs: int) -> tuple[float, float]:
    """95% Wilson interval for accuracy over several runs of the same items (``correct_per_item``:
    in how many runs each item was right). Runs of one item agree more than independent answers
    would, so the interval uses the effective number of answers (the total divided by the design
    effect, the variance of per-item means over the binomial variance), which lies between the
    number of items and the number of answers; with one run it is the plain Wilson interval."""
    items = len(correct_per_item)
    answers = items * runs
    if answers == 0:
        return (0.0, 0.0)
    accuracy = sum(correct_per_item) / answers
    effective = float(items)
    if 0.0 < accuracy < 1.0 and items > 1:
        means = [correct / runs for correct in correct_per_item]
        spread = sum((mean - accuracy) ** 2 for mean in means) / (items - 1) / items
        design_effect = spread / (accuracy * (1 - accuracy) / answers)
        effective = min(float(answers), max(float(items), answers / design_effect if design_effect else answers))
    return wilson_interval(accuracy * effective, effective)
