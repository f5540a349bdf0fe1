import numpy as np
import pytest

from specem_local.backend.scoring import (
    KEEP,
    RowScores,
    end_score,
    log_normalisers,
    mean_score,
    row_scores,
    segment_score,
)

ROWS = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]], dtype=np.float32))


def token_scores(rows: np.ndarray, tokens: list[int], scoring: str) -> np.ndarray:
    scores = row_scores(rows, tokens, normalise=True)
    return scores.chosen - scores.normalisers if scoring == "logprob" else scores.chosen


def test_token_scores_are_log_probabilities_or_raw_logits():
    assert token_scores(ROWS, [0, 2], "logprob") == pytest.approx(np.log([0.5, 0.8]), abs=1e-6)
    assert token_scores(ROWS + 3.0, [0, 2], "logit") == pytest.approx(np.log([0.5, 0.8]) + 3.0, abs=1e-6)
    assert token_scores(ROWS + 3.0, [0, 2], "logprob") == pytest.approx(np.log([0.5, 0.8]), abs=1e-6)


def test_end_score_sums_every_end_token():
    row = np.log(np.array([0.5, 0.2, 0.3], dtype=np.float32))
    assert end_score(row, np.array([1, 2]), "logprob") == pytest.approx(np.log(0.5), abs=1e-6)
    assert end_score(row + 1.0, np.array([1, 2]), "logit") == pytest.approx(np.log(0.3) + 1.0, abs=1e-6)
    assert end_score(row + 1.0, np.array([1, 2]), "logprob", normaliser=1.0) == pytest.approx(np.log(0.5), abs=1e-6)


def test_an_unlikely_end_lowers_a_segment_score():
    without = segment_score(ROWS, [0, 2], "logprob")
    likely_end = np.log(np.array([0.05, 0.05, 0.9], dtype=np.float32))
    unlikely_end = np.log(np.array([0.98, 0.01, 0.01], dtype=np.float32))
    ends = np.array([2])
    assert without == pytest.approx(np.log([0.5, 0.8]).mean(), abs=1e-6)
    assert segment_score(ROWS, [0, 2], "logprob", (likely_end, ends)) == pytest.approx(
        np.log([0.5, 0.8, 0.9]).mean(), abs=1e-6
    )
    assert segment_score(ROWS, [0, 2], "logprob", (unlikely_end, ends)) < without - 1.0


def test_log_normalisers_match_float64_and_survive_large_logits():
    rng = np.random.default_rng(0)
    rows = (rng.normal(size=(4, 262_144)) * 8 + 1000).astype(np.float32)
    exact = np.log(np.exp(rows.astype(np.float64) - 1000).sum(axis=1)) + 1000
    assert log_normalisers(rows) == pytest.approx(exact, abs=1e-3)
    scratch = rows.copy()
    assert log_normalisers(scratch, overwrite=True) == pytest.approx(exact, abs=1e-3)
    assert not np.array_equal(scratch, rows)  # it did use the rows as scratch space


def test_row_scores_pick_targets_and_keep_whole_rows_before_overwriting():
    rows = ROWS.copy()
    scores = row_scores(rows, [2, KEEP], normalise=True, overwrite=True)
    assert scores.chosen[0] == pytest.approx(np.log(0.25)) and np.isnan(scores.chosen[1])
    assert scores.normalisers == pytest.approx([0.0, 0.0], abs=1e-6)
    assert scores.kept[1] == pytest.approx(ROWS[1])
    unnormalised = row_scores(ROWS, [0, 1], normalise=False)
    assert np.isnan(unnormalised.normalisers).all() and not unnormalised.kept


def test_row_scores_of_consecutive_batches_join_with_their_kept_rows_renumbered():
    first = row_scores(ROWS, [0, KEEP], normalise=True)
    second = row_scores(ROWS, [KEEP, 2], normalise=True)
    joined = RowScores.join([first, second])
    assert sorted(joined.kept) == [1, 2] and joined.kept[2] == pytest.approx(ROWS[0])
    assert len(joined.chosen) == len(joined.normalisers) == 4


def test_mean_score_counts_the_end_as_one_more_token():
    chosen, normalisers = np.array([-1.0, -3.0]), np.array([1.0, 1.0])
    assert mean_score(chosen, normalisers, "logprob") == pytest.approx(-3.0)
    assert mean_score(chosen, normalisers, "logit", end=-5.0) == pytest.approx(-3.0)
