"""The deadline of a worker's steps (backend/watchdog.py): generous at first, then a multiple
of the slowest pace seen, never below a floor."""

from __future__ import annotations

import pytest

from specem_local.backend.watchdog import FIRST_PER_ROW, LEAST, SLACK, WARMUP_STEPS, StepDeadlines


def test_the_first_steps_get_the_generous_deadline_and_long_prompts_more():
    deadlines = StepDeadlines(first=120)
    assert deadlines.deadline(0) == 120 and deadlines.deadline(2000) == pytest.approx(120 + 2000 * FIRST_PER_ROW)
    for _ in range(WARMUP_STEPS - 1):
        deadlines.record(0.01, 1)
    assert deadlines.deadline(0) == 120


def test_later_steps_follow_the_slowest_pace_seen_never_below_the_floor():
    deadlines = StepDeadlines(first=120)
    for seconds, rows in ((0.02, 1), (0.5, 99), (0.004, 0), (0.01, 1)):
        deadlines.record(seconds, rows)
    assert deadlines.pace == pytest.approx(0.01)  # 0.02 s for 1 row + the call, and 0.5 s for 100
    assert deadlines.deadline(0) == LEAST  # a memory operation: the floor
    assert deadlines.deadline(999) == pytest.approx(SLACK * 0.01 * 1000)  # a long batch: in proportion
    deadlines.record(3.0, 9)  # one slow step raises every later deadline
    assert deadlines.deadline(9) == pytest.approx(SLACK * 3.0)
