"""The OpenAI Agents SDK (``openai-agents``) against a live server over fake models: an agent with
a function tool, run by ``Runner.run_sync`` through the Responses API (``OpenAIResponsesModel``,
what the SDK uses by default) and through chat completions (``OpenAIChatCompletionsModel``). The
fakes call the tool until they read its result, then answer: the SDK must run the tool with the
arguments the models wrote, send its result back, and end with the answer that read it."""

from __future__ import annotations

from collections.abc import Iterator

import agents
import pytest
from openai import AsyncOpenAI

from specem_local.server import EnsembleServer, ServerOptions
from tests.engine.conftest import fake_ensemble
from tests.engine.test_functions import calls_until, scripted
from tests.server.live import serving

CALL = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
RESULT = "18 C and sunny in Paris"
ANSWER = "It is 18 C and sunny in Paris."


@pytest.fixture
def base() -> Iterator[str]:
    """Both members call get_weather(city="Paris") until they read its result, then answer."""
    members = [scripted(name, calls_until(RESULT, call=CALL, answer=ANSWER)) for name in "ab"]
    ensemble = fake_ensemble(*members, segment_tokens=6, max_tokens=120)
    with serving(EnsembleServer(ensemble, ServerOptions(queue=2, record=False))) as url:
        yield url
    ensemble.close()


def weather_agent(model: agents.Model) -> tuple[agents.Agent, list[str]]:
    """An agent whose one tool records each city it is asked about."""
    asked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"18 C and sunny in {city}"

    agent = agents.Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather], model=model)
    return agent, asked


@pytest.fixture(autouse=True)
def no_tracing() -> Iterator[None]:
    """The SDK would send traces to OpenAI's servers: off, and back as it was after."""
    agents.set_tracing_disabled(True)
    yield
    agents.set_tracing_disabled(False)


def client_of(base: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_an_agent_runs_its_tool_with_the_models_arguments_and_answers_from_the_result(base, api):
    client = client_of(base)
    model: agents.Model
    if api == "responses":
        model = agents.OpenAIResponsesModel(model="specem", openai_client=client)
    else:
        model = agents.OpenAIChatCompletionsModel(model="specem", openai_client=client)
    agent, asked = weather_agent(model)
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    assert asked == ["Paris"]  # the call the models wrote, run once
    kinds = [item.type for item in result.new_items]
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert result.new_items[1].output == RESULT  # type: ignore[union-attr]
    assert result.final_output == ANSWER  # the answer that read the result
    assert len(result.raw_responses) == 2  # one request for the call, one for the answer
