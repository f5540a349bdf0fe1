"""``n`` answers to one request (issue 57): each a choice of its own, run as several answers at
once, sampled with a seed each; whole and streamed through the ``openai`` client."""

from __future__ import annotations

import openai
import pytest

from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.test_places import ensemble
from tests.server.live import serving

ASKED = [{"role": "user", "content": "apple"}]


@pytest.fixture
def client():
    places = ensemble(2, max_tokens=24)
    with serving(EnsembleServer(places, ServerOptions(queue=4, record=False))) as base:
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
    places.close()


def test_n_answers_are_n_choices_sampled_apart_whole_and_streamed(client):
    reply = client.chat.completions.create(model="specem", messages=ASKED, n=2, temperature=3.0, seed=7)
    assert [c.index for c in reply.choices] == [0, 1]
    texts = [c.message.content for c in reply.choices]
    assert texts[0] != texts[1] and all(texts)  # sampled with seeds of their own
    facts = reply.model_extra["x_specem"]["choices"]
    assert len(facts) == 2 and reply.usage.completion_tokens >= 2
    chunks = list(client.chat.completions.create(model="specem", messages=ASKED, n=2, stream=True,
                                                 stream_options={"include_usage": True}))  # fmt: skip
    ends = [c.choices[0] for c in chunks if c.choices and c.choices[0].finish_reason]
    assert sorted(end.index for end in ends) == [0, 1]
    streamed = {i: "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
                for i in (0, 1)}  # fmt: skip
    assert all(text.startswith("You said apple") for text in streamed.values())  # greedy by default: the same answer
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_n_past_eight_is_a_400_naming_it_and_the_next_request_is_answered(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="specem", messages=ASKED, n=9)
    assert refused.value.body["param"] == "n"
    assert client.chat.completions.create(model="specem", messages=ASKED, n=1).choices[0].message.content


def test_n_past_what_the_line_takes_is_a_429_for_all_and_the_next_request_is_answered():
    places = ensemble(2, max_tokens=24)
    with serving(EnsembleServer(places, ServerOptions(queue=1, record=False))) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="specem", messages=ASKED, n=5)
        assert refused.value.response.headers["retry-after"]
        assert places.runner.running + places.runner.waiting == 0  # the answers it had started are given back
        assert len(client.chat.completions.create(model="specem", messages=ASKED, n=2).choices) == 2
    places.close()
