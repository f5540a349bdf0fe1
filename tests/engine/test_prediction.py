"""Predicted outputs (``prediction.py``): an answer drafted with a prediction is the answer drafted
without one, greedy or sampled, whether the prediction is right, wrong from its first token or
right only for a while; where it is right, its tokens are drafted without a decode of their own.
The reserve member that answers for an unsure ensemble, and the paid check's witnesses, take the
ensemble's answer as theirs. Fakes whose KV memory checks every decode as llama.cpp would."""

from __future__ import annotations

import pytest

from specem_local.engine.prediction import ReadAhead, predicted_rest
from specem_local.errors import SettingError
from tests.engine.conftest import QUESTION, fake_ensemble, fake_member

ANSWER = "Six times seven is forty-two, which is the answer."


def pair():
    return [fake_member("a", ANSWER, n_params=3000), fake_member("b", ANSWER, words=(" is", " the"))]


def decodes(ensemble) -> int:
    return sum(member.model.decodes for member in ensemble.members)


def answered(prediction: str | None, **settings):
    """The final event and the decode calls of an answer of the pair, with ``prediction``."""
    with fake_ensemble(*pair(), max_tokens=60, segment_tokens=6, **settings) as ensemble:
        asked = {} if prediction is None else {"prediction": prediction}
        final = ensemble.generate(QUESTION, **asked)
        assert all(not member.model.violations for member in ensemble.members)
        return final, decodes(ensemble)


@pytest.mark.parametrize("settings", [{}, {"greedy": False, "temperature": 1.5, "seed": 3}])
def test_a_right_prediction_drafts_the_same_answer_with_fewer_decodes(settings):
    plain, plain_decodes = answered(None, **settings)
    final, fewer = answered(plain.text, **settings)
    assert final.text == plain.text and final.tokens == plain.tokens
    assert final.predicted_tokens > final.tokens  # both drafters drafted most of it as predicted
    assert fewer < plain_decodes / 2, (fewer, plain_decodes)
    assert (plain.predicted_tokens, plain.unpredicted_tokens) == (0, 0)


def test_a_prediction_wrong_from_its_first_token_changes_nothing_but_a_batch_a_round():
    plain, plain_decodes = answered(None)
    final, spent = answered("Zebras do not multiply.")
    assert final.text == plain.text == ANSWER and final.predicted_tokens == 0
    assert final.unpredicted_tokens > 0 and spent == plain_decodes + 2  # read ahead once each, then left


def test_a_prediction_right_for_a_while_is_followed_until_the_answer_leaves_it():
    plain, plain_decodes = answered(None)
    final, spent = answered("Six times seven is forty-two, or so I think.")
    assert final.text == plain.text
    assert 0 < final.predicted_tokens < 2 * final.tokens and final.unpredicted_tokens > 0
    assert spent < plain_decodes


def test_a_prediction_that_is_not_text_is_a_setting_error_and_the_next_answer_runs():
    with fake_ensemble(*pair(), max_tokens=60) as ensemble:
        with pytest.raises(SettingError, match=r"^prediction must be text") as caught:
            ensemble.generate(QUESTION, prediction=["Six"])
        assert caught.value.field == "prediction"
        assert ensemble.generate(QUESTION, prediction="").text == ANSWER


def test_the_reserve_answers_with_the_ensembles_answer_as_its_prediction():
    close = "Six times seven is forty-one."
    reserve = fake_member("big", close, role="reserve", n_params=9000)
    with fake_ensemble(*pair(), reserve, max_tokens=60, segment_tokens=6) as ensemble:
        final = ensemble.generate(QUESTION, escalate_below=0.9999)
        assert final.escalated == "big" and final.text == close and final.ensemble_text == ANSWER
        assert final.predicted_tokens > len("Six times seven is forty-") / 2  # the shared start, read ahead
        assert not reserve.model.violations


def test_the_witnesses_check_reads_the_answer_ahead_and_says_what_it_said_before():
    with fake_ensemble(*pair(), fake_member("c", "So 7.", n_params=10), max_tokens=60, segment_tokens=6) as ensemble:
        final = ensemble.generate(QUESTION, confidence_check="witnesses")
        assert final.evidence["witnesses"] == pytest.approx(0.5)  # b agrees, c does not
        assert all(not member.model.violations for member in ensemble.members)


def test_predicted_rest_follows_the_answer_only_while_it_is_the_predictions_start():
    assert predicted_rest("Paris is big.", "") == "Paris is big."
    assert predicted_rest("Paris is big.", "Paris") == " is big."
    assert predicted_rest("Paris is big.", "Paris is big.") == ""
    assert predicted_rest("Paris is big.", "Rome") == ""
    assert predicted_rest("", "Paris") == ""


def test_read_ahead_gives_each_predicted_row_then_drops_the_rest_at_the_first_miss():
    member = fake_member("a", ANSWER)
    member.start(member.model.tokenize("### User: hi\n### Assistant:"))
    start = len(member.tokens)
    model = member.model
    ahead = ReadAhead(model, model.tokenize(" Six x"), start)
    assert ahead.read == 6 and model.decodes == 2  # the prompt, then the prediction in one batch
    assert ahead.next_row(model.tokenize(" ")[0]) is ahead.rows[0]
    assert ahead.next_row(model.tokenize("S")[0]) is ahead.rows[1]
    assert ahead.next_row(model.tokenize("X")[0]) is None and ahead.used == 2
    assert len([cell for cell in model.cells if 0 in cell.seqs]) == start + 2  # the rest dropped
    assert ahead.next_row(model.tokenize("i")[0]) is None  # left for good
