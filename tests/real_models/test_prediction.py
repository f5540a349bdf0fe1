"""Predicted outputs on the real demo trio (``prediction.py``): a prediction that is wrong from its
first token is read ahead in one llama.cpp batch and left, the answer as without it; a right one
is drafted from the rows read ahead (``predicted_tokens``). Those rows come from a batched decode,
whose logits differ from one-token decodes by a few tenths here, so a near tie can go the other
way (docs/performance.md); an answer with clear margins is the same."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.models

QUESTIONS = ("What is 12 plus 30? Answer with the number.", "Name three colours.", "Write a haiku about rain.")


@pytest.mark.parametrize("question", QUESTIONS)
def test_a_wrong_prediction_is_left_after_one_batch_and_a_right_one_is_drafted_from(trio, question):
    plain = trio.generate(question, max_tokens=40)
    assert plain.text and (plain.predicted_tokens, plain.unpredicted_tokens) == (0, 0)
    wrong = trio.generate(question, max_tokens=40, prediction="Zebras do not multiply. " * 4)
    assert wrong.text == plain.text and wrong.predicted_tokens == 0 and wrong.unpredicted_tokens > 0
    right = trio.generate(question, max_tokens=40, prediction=plain.text)
    assert right.predicted_tokens > 0 and right.finish_reason == plain.finish_reason


def test_an_answer_with_clear_margins_is_the_same_with_its_prediction(trio):
    plain = trio.generate(QUESTIONS[0], max_tokens=40)
    right = trio.generate(QUESTIONS[0], max_tokens=40, prediction=plain.text)
    assert right.text == plain.text and right.predicted_tokens >= right.tokens
