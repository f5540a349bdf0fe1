"""The confidence measures of research/confidence.py on numbers whose answers are known: AUROC,
ECE, two signals' AUROC compared on the same answers, and the escalation curve (the ensemble's
answer, or the reserve's below the threshold)."""

from __future__ import annotations

import pytest

from specem_research import confidence as report


def test_auroc_is_the_chance_a_right_answer_scores_above_a_wrong_one():
    assert report.auroc([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert report.auroc([0.1, 0.9], [True, False]) == 0.0
    assert report.auroc([0.5, 0.5], [True, False]) == 0.5  # a tie counts half


def test_ece_is_the_gap_between_said_and_seen_weighed_by_bin():
    assert report.ece([0.95] * 20, [True] * 19 + [False]) == pytest.approx(0.0, abs=1e-9)
    assert report.ece([0.9] * 10, [False] * 10) == pytest.approx(0.9)


def test_the_paired_auroc_difference_resamples_the_same_answers_for_both_signals():
    right = [True, False] * 20
    perfect = [1.0 if r else 0.0 for r in right]
    backwards = [0.0 if r else 1.0 for r in right]
    ahead = report.paired_auroc_difference(perfect, backwards, right)
    assert ahead["difference"] == 1.0 and ahead["ci95"] == [1.0, 1.0] and ahead["not_ahead"] == 0.0
    level = report.paired_auroc_difference(perfect, perfect, right)
    assert level["difference"] == 0.0 and level["ci95"] == [0.0, 0.0] and level["not_ahead"] == 1.0
    noisy = [0.9, 0.2, 0.4, 0.6, 0.8, 0.1, 0.7, 0.3] * 5
    mixed = report.paired_auroc_difference(noisy, backwards, right)
    assert mixed["difference"] == pytest.approx(report.auroc(noisy, right) - 0.0)
    assert mixed["ci95"][0] < mixed["difference"] < mixed["ci95"][1] + 1e-9 and mixed["not_ahead"] == 0.0


def test_the_escalation_curve_takes_the_reserves_answer_and_time_below_the_threshold():
    answers = [
        {"id": "a", "correct": True, "seconds": 1.0},
        {"id": "b", "correct": False, "seconds": 1.0},
        {"id": "c", "correct": False, "seconds": 2.0},
    ]
    reserve = {"a": {"correct": False, "seconds": 3.0}, "b": {"correct": True, "seconds": 3.0},
               "c": {"correct": True, "seconds": 5.0}}  # fmt: skip
    curve = report.escalation_curve(answers, [0.9, 0.3, 0.6], reserve, thresholds=(0.0, 0.5, 0.7, 1.0))
    assert [p["escalated"] for p in curve] == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert [p["accuracy"] for p in curve] == pytest.approx([1 / 3, 2 / 3, 1, 2 / 3])
    assert [p["seconds"] for p in curve] == [4.0, 7.0, 12.0, 15.0]
