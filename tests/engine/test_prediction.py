"""Predicted outputs (``prediction.py``): an answer drafted with a prediction is the answer drafted
without one, greedy or sampled, whether the prediction is right, wrong from its first token or
right only for a while; where it is right, its tokens are drafted without a decode of their own.
The reserve member that answers for an unsure ensemble, and the paid check's witnesses, take the
ensemble's answer as theirs. Fakes whose KV memory checks every decode as llama.cpp would."""

from __future__ import annotations

import numpy as np
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
    member = fake_member("a", ANSWER, words=(" Six", "xy"))
    member.start(member.model.tokenize("### User: hi\n### Assistant:\n"))
    start, model = len(member.tokens), member.model
    [space], [six], [x], [y], [z] = (model.tokenize(text) for text in (" ", " Six", "x", "y", "z"))

    def cells() -> int:
        return len([cell for cell in model.cells if 0 in cell.seqs])

    def row_after(*tokens: int):  # what a one-token decode would give after the draft's tokens
        return model.next_logits([*member.tokens, *tokens])

    ahead = ReadAhead(model, " Six xyz", start, 20)
    assert ahead.tokens == [six, space, model.tokenize("xy")[0], z] and ahead.read == 4 and model.decodes == 2
    first = ahead.rows[0]
    assert ahead.next_row(six) is first and ahead.used == 1 and model.decodes == 2  # as predicted: no decode
    assert np.array_equal(first, row_after(six))
    assert ahead.next_row(space) is not None and ahead.used == 2
    row = ahead.next_row(x)  # "x" where "xy" was read: the same text in other tokens, read again from "y"
    assert np.array_equal(row, row_after(six, space, x)) and model.decodes == 3
    assert ahead.tokens == [y, z] and (ahead.read, ahead.used) == (6, 2)
    assert ahead.next_row(y) is not None and ahead.used == 3
    assert ahead.next_row(model.tokenize("X")[0]) is None and ahead.text == b""  # the text left: for good
    assert cells() == start + 4  # " Six", " ", "x", "y" kept, the rest read ahead dropped ("X" is the caller's)
    assert ahead.next_row(z) is None and model.decodes == 3


def test_read_ahead_never_reads_past_the_drafts_limit_and_leaves_the_last_decode_to_the_draft():
    member = fake_member("a", ANSWER, words=("Six",))
    member.start(member.model.tokenize("### User: hi\n### Assistant:\n"))
    start, model = len(member.tokens), member.model
    ahead = ReadAhead(model, "Six times seven", start, 4)
    assert ahead.tokens == model.tokenize("Six ti") and ahead.read == 4  # "Six", " ", "t", "i"
    assert ReadAhead(model, "", start + 4, 4).read == 0 and model.decodes == 2  # nothing to read, nothing decoded
    [big_s] = model.tokenize("S")
    ahead.drop(0)
    ahead = ReadAhead(model, "Six", start, 2)
    assert ahead.next_row(big_s) is not None  # "S" where "Six" was read: "ix" read again, 1 token of room left
    assert ahead.tokens == model.tokenize("i")
    ahead.drop(0)
    ahead = ReadAhead(model, "Six", start, 1)
    assert ahead.next_row(big_s) is None and ahead.text  # no room to read "ix": the draft decodes "S" itself


def test_the_row_after_a_token_read_again_is_that_tokens_not_the_next_ones():
    member = fake_member("a", ANSWER, words=("times",))
    member.start(member.model.tokenize("### User: hi\n### Assistant:\n"))
    model = member.model
    ahead = ReadAhead(model, ANSWER, len(member.tokens), 40)
    drafted = model.tokenize("Six t")  # "t" where the prediction has "times": read again from "imes"
    rows = [ahead.next_row(token) for token in drafted]
    assert all(row is not None for row in rows) and ahead.used == len(drafted) - 1
    after_t = model.next_logits([*member.tokens, *drafted])
    assert np.array_equal(rows[-1], after_t) and not np.array_equal(after_t, ahead.rows[0])  # rows differ here
