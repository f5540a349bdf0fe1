import numpy as np
import pytest

from specem_local.member import end_score, segment_score, token_scores

ROWS = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]], dtype=np.float32))


def test_token_scores_are_log_probabilities_or_raw_logits():
    assert token_scores(ROWS, [0, 2], "logprob") == pytest.approx(np.log([0.5, 0.8]), abs=1e-6)
    assert token_scores(ROWS + 3.0, [0, 2], "logit") == pytest.approx(np.log([0.5, 0.8]) + 3.0, abs=1e-6)
    assert token_scores(ROWS + 3.0, [0, 2], "logprob") == pytest.approx(np.log([0.5, 0.8]), abs=1e-6)


def test_end_score_sums_every_end_token():
    row = np.log(np.array([0.5, 0.2, 0.3], dtype=np.float32))
    assert end_score(row, np.array([1, 2]), "logprob") == pytest.approx(np.log(0.5), abs=1e-6)
    assert end_score(row + 1.0, np.array([1, 2]), "logit") == pytest.approx(np.log(0.3) + 1.0, abs=1e-6)


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
