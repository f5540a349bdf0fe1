"""OpenAI's predicted outputs on chat completions through the ``openai`` client, against a live
server over fake models: ``prediction`` read ahead (the answer as without it; the tokens drafted
as predicted and those read for nothing in ``usage.completion_tokens_details``), streamed and
not, several choices, and a bad ``prediction`` a 400 naming it, the next request answered."""

from __future__ import annotations

import openai
import pytest

from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.live import serving

ANSWER = "Six times seven is forty-two, which is the answer."
ASKED = {"model": "specem", "messages": [{"role": "user", "content": "Six times seven?"}], "temperature": 0}


@pytest.fixture
def client():
    ensemble = fake_ensemble(fake_member("a", ANSWER, n_ctx=4096), fake_member("b", ANSWER, n_ctx=4096),
                             max_tokens=80, segment_tokens=6)  # fmt: skip
    with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False))) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)
    ensemble.close()


def test_a_prediction_is_read_ahead_and_counted_in_the_usage(client):
    plain = client.chat.completions.create(**ASKED)
    assert plain.choices[0].message.content == ANSWER
    assert plain.usage.completion_tokens_details is None  # nothing predicted, nothing said
    predicted = client.chat.completions.create(**ASKED, prediction={"type": "content", "content": ANSWER})
    details = predicted.usage.completion_tokens_details
    assert predicted.choices[0].message.content == ANSWER
    assert details.accepted_prediction_tokens > predicted.usage.completion_tokens  # both members drafted from it
    assert details.rejected_prediction_tokens >= 0
    parts = [{"type": "text", "text": ANSWER[:20]}, {"type": "text", "text": "and then something else"}]
    partly = client.chat.completions.create(**ASKED, prediction={"type": "content", "content": parts})
    partial = partly.usage.completion_tokens_details
    assert partly.choices[0].message.content == ANSWER
    assert 0 < partial.accepted_prediction_tokens < details.accepted_prediction_tokens
    assert partial.rejected_prediction_tokens > 0


def test_a_prediction_streamed_and_for_several_choices(client):
    chunks = list(client.chat.completions.create(**ASKED, prediction={"type": "content", "content": ANSWER},
                                                 stream=True, stream_options={"include_usage": True}))  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER
    assert chunks[-1].usage.completion_tokens_details.accepted_prediction_tokens > 0
    several = client.chat.completions.create(**ASKED, n=2, prediction={"type": "content", "content": ANSWER})
    assert [choice.message.content for choice in several.choices] == [ANSWER, ANSWER]


@pytest.mark.parametrize(
    ("prediction", "param"),
    [
        ("Six", "prediction"),
        ({"type": "text", "content": "Six"}, "prediction"),
        ({"type": "content"}, "prediction.content"),
        ({"type": "content", "content": 6}, "prediction.content"),
        ({"type": "content", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "prediction.content"),
    ],
)
def test_a_bad_prediction_is_a_400_naming_it_and_the_next_is_answered(client, prediction, param):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**ASKED, prediction=prediction)  # type: ignore[arg-type]
    assert refused.value.body["param"] == param  # type: ignore[index]
    assert client.chat.completions.create(**ASKED).choices[0].message.content == ANSWER
