"""The short soak (50 answers) of ``research/soak.py``; the 500-answer figures are in the README."""

from __future__ import annotations

from specem_research.soak import soak


def test_fifty_answers_with_cancels_and_reloads_lose_nothing_and_do_not_grow(tmp_path):
    result = soak(answers=50, max_tokens=12, reload_every=25, config_path=None, seed=1, data=tmp_path)
    assert result["lost"] == result["corrupt"] == result["record_errors"] == result["left_streaming"] == 0
    assert result["integrity"] == "ok" and result["finishes"].get("cancelled", 0) > 0
    assert result["peak_rss_growth"] <= 0.05, result["peak_rss_by_block"]
