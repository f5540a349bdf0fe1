"""A whole agent loop in the chat app (issue 47): a chat ``specem serve`` or ``specem run
--functions`` recorded, with the call, the tool's result and the answer, shows each of them
(the call as its call, the result as a tool result), never the envelope."""

from __future__ import annotations

from specem_local.storage.chats import Turn
from specem_local.storage.history import History
from tests.engine.conftest import fake_ensemble, fake_member
from tests.tui.pilot import data_dir, open_recorded
from tests.tui.test_chat import app_with

__all__ = ["data_dir"]  # the autouse fixture

CALL = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'
ANSWER = '{"response": "It is 18 C and sunny in Paris."}'


async def test_a_recorded_loop_shows_the_call_the_result_and_the_answer():
    weather = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    asked = [Turn("user", "Weather in Paris?"), Turn("assistant", CALL), Turn("tool", "18 C, sunny (K7Q-2231)")]
    record = History().start_new_chat("serve", asked)
    served = fake_ensemble(fake_member("big", ANSWER, n_params=3000, n_ctx=2048), fake_member("b", ANSWER, n_ctx=2048))
    loop = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny (K7Q-2231)"},
    ]
    for event in served.stream(loop, tools=[weather], max_tokens=120):
        record.event(event)
    served.close()
    app = app_with(fake_member("big", "Fine.", n_params=3000), fake_member("small", "Fine."))
    async with app.run_test(size=(100, 40)) as pilot:
        await open_recorded(pilot, app, record.chat_id, 3)
        shown = app.export_screenshot().replace("&#160;", " ")
        for said in ("Calls a tool", "get_weather", "Tool result", "K7Q-2231", "It is 18 C and sunny in Paris."):
            assert said in shown, said
        assert "tool_calls" not in shown and '"response"' not in shown
