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


def test_read_ahead_gives_each_predicted_row_reads_again_where_the_text_still_follows_and_drops_the_rest():
    member = fake_member("a", ANSWER, words=(" Six",))
    member.start(member.model.tokenize("### User: hi\n### Assistant:"))
    start, model = len(member.tokens), member.model
    space, six, big_s, x = (
        model.tokenize(" ")[0],
        model.tokenize(" Six")[0],
        model.tokenize("S")[0],
        model.tokenize("X")[0],
    )

    def cells() -> int:
        return len([cell for cell in model.cells if 0 in cell.seqs])

    ahead = ReadAhead(model, " Six x", start, 20)
    assert ahead.tokens == [six, space, model.tokenize("x")[0]] and ahead.read == 3 and model.decodes == 2
    first = ahead.rows[0]
    assert ahead.next_row(six) is first and ahead.used == 1 and model.decodes == 2  # as predicted: no decode
    ahead.drop()
    assert cells() == start + 1  # the drafted token's cell only
    model.seq_remove(0, start, -1)

    ahead = ReadAhead(model, " Six x", start, 20)
    assert ahead.next_row(space) is not None  # " " then "Six x": the same text, tokenized otherwise
    assert model.decodes == 4 and ahead.tokens == model.tokenize("Six x") and (ahead.read, ahead.used) == (8, 0)
    assert ahead.next_row(big_s) is not None and ahead.used == 1 and model.decodes == 4
    assert ahead.next_row(x) is None and ahead.text == b""  # the text left: the prediction left for good
    assert cells() == start + 2  # " " and "S" kept, the rest read ahead dropped ("X" is the caller's to decode)
    assert ahead.next_row(big_s) is None and model.decodes == 4


def test_read_ahead_never_reads_past_the_drafts_limit():
    member = fake_member("a", ANSWER)
    member.start(member.model.tokenize("### User: hi\n### Assistant:"))
    ahead = ReadAhead(member.model, "Six times seven", len(member.tokens), 4)
    assert ahead.tokens == member.model.tokenize("Six ") and ahead.read == 4
    assert ReadAhead(member.model, "", len(member.tokens), 4).read == 0
