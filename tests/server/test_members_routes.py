"""Each member served alone as a model of its own (issue 57): ``specem/NAME`` in the model lists,
and a request naming it answers as that member alone would, through the official clients."""

from __future__ import annotations

import ollama
import openai
import pytest

from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble, fake_member
from tests.server.live import serving

ASKED = [{"role": "user", "content": "Who wins?"}]
ALPHA, BETA = "Alpha wins the vote.", "Beta answers alone."


def members():
    return fake_member("alpha", ALPHA, n_params=3000), fake_member("beta", BETA)


@pytest.fixture
def base():
    ensemble = fake_ensemble(*members(), max_tokens=16)
    with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False))) as url:
        yield url
    ensemble.close()


def alone(name: str) -> str:
    """What the member answers in an ensemble of its own."""
    member = next(m for m in members() if m.spec.name == name)
    with fake_ensemble(member, max_tokens=16) as solo:
        return solo.generate("Who wins?").text


def test_a_member_named_answers_alone_and_the_ensemble_does_not(base):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=30)
    listed = [model.id for model in client.models.list()]
    assert listed == ["specem", "specem/alpha", "specem/beta"]
    assert client.models.retrieve("specem/beta").id == "specem/beta"
    together = client.chat.completions.create(model="specem", messages=ASKED)
    by_beta = client.chat.completions.create(model="specem/beta", messages=ASKED)
    assert by_beta.choices[0].message.content == alone("beta") != together.choices[0].message.content
    assert by_beta.model == "specem/beta"
    assert set(by_beta.model_extra["x_specem"]["weights"]) == {"beta"}


def test_ollamas_client_lists_the_members_and_asks_one(base):
    client = ollama.Client(host=base, timeout=30)
    names = [model.model for model in client.list().models]
    assert names == ["specem:latest", "specem/alpha:latest", "specem/beta:latest"]
    reply = client.chat(model="specem/beta:latest", messages=ASKED)
    assert reply.message.content == alone("beta")


def test_a_member_not_served_is_a_404_listing_the_ones_that_are_and_the_next_request_answers(base):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=30)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="specem/gamma", messages=ASKED)
    assert "'specem/alpha', 'specem/beta'" in str(missing.value)
    assert client.chat.completions.create(model="specem/alpha", messages=ASKED).choices[0].message.content
