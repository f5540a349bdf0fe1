"""The no-exit ceiling of ``research/decode_cost.py``: plain arithmetic over step costs."""

from __future__ import annotations

import pytest

from specem_research.decode_cost import ceiling


def costs(*pairs: tuple[float, float]) -> list[dict[str, float]]:
    return [{"draft_step_ms": step, "row_ms": row} for step, row in pairs]


def test_free_verification_reaches_the_ideal():
    assert ceiling(costs((30, 0), (20, 0)), foreign=1) == 1.0


def test_each_drafted_token_pays_for_the_foreign_rows():
    # one step of 10 ms, two foreign rows of 2.5 ms: 10 / (10 + 5)
    assert ceiling(costs((10, 2.5)), foreign=2) == pytest.approx(2 / 3)
    assert ceiling(costs((10, 2.5), (20, 5)), foreign=2) == pytest.approx(30 / 45)


def test_shared_starts_are_not_decoded_again():
    assert ceiling(costs((10, 5)), foreign=2, shared=0.5) == pytest.approx(10 / 15)
