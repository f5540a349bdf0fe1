"""The inspector's explanation of a round, from the event stream's JSON (no model needed)."""

from __future__ import annotations

from specem_tui.screens.inspector import explain


def candidate(model: str, combined: float, copied: float | None = None) -> dict:
    return {"model": model, "combined": combined, "shares": {"a": combined, "b": combined}, "copied": copied}


def round_event(author: str, candidates: list[dict]) -> dict:
    return {"index": 3, "author": author, "decision": "vote", "candidates": candidates, "weights": {"a": 0.6, "b": 0.4}}


def test_a_plain_vote_names_the_runner_up():
    text = explain(round_event("a", [candidate("a", 0.7), candidate("b", 0.3)]))
    assert "Round 3: a won the weighted vote with 0.700 against 0.300 (b)." in text
    assert "loop guard" not in text
    assert "Weights after this round: a 0.60, b 0.40." in text


def test_a_loop_guard_win_says_which_candidate_was_discounted():
    text = explain(round_event("b", [candidate("a", 0.7, copied=1.0), candidate("b", 0.3, copied=0.0)]))
    assert "with 0.300 against 0.700 (a)." in text
    assert "The loop guard discounted a: 100% of it repeats the answer." in text
