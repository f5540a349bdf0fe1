"""What every API writes back, in one place (issue 54): the pieces a streamed answer shows, a
whole answer's text and calls, how it ended, and the ensemble's own facts."""

from __future__ import annotations

from specem_local.engine import ToolCall, ToolReply
from specem_local.events import FinalEvent, RoundEvent, StartEvent
from specem_local.server.replies import Pieces, answer_facts, finish_name, prompt_tokens, round_facts, whole_reply


def round_of(text: str, index: int = 1, phase: str = "answer") -> RoundEvent:
    return RoundEvent(index, text, "a", "vote", (), {"a": 1.0}, (), {}, {}, {}, 0.1, 3, phase=phase)  # type: ignore[arg-type]


def final_of(text: str, finish: str = "eos", parsed: object = None) -> FinalEvent:
    return FinalEvent(text, finish, 3, 9, 1.0, 0.2, {"a": 3}, 1.0, {"a": 1.0}, False, parsed=parsed)  # type: ignore[arg-type]


def test_a_tool_reply_streams_its_message_and_each_call_once_whole_never_the_envelope():
    pieces = Pieces(tools=True)
    segments = ['{"tool_calls": [{"name": "get', '_time", "arguments": {"zone": "UTC', '"}}', ", ", '{"name": "x", ']
    got = [pieces.of(round_of(s, i)) for i, s in enumerate(segments, 1)]
    assert got[0] is None and got[1] is None  # the envelope and a name not yet whole: nothing to show
    assert got[2] is not None and [(i, c.name, c.arguments) for i, c in got[2].calls] == [
        (0, "get_time", {"zone": "UTC"})
    ]
    assert got[3] is None and got[4] is None
    message = Pieces(tools=True)
    assert message.of(round_of('{"response": "It is ')).text == "It is "  # type: ignore[union-attr]
    assert message.of(round_of('noon."}')).text == "noon."  # type: ignore[union-attr]


def test_thinking_and_plain_text_are_pieces_of_their_own():
    assert Pieces(tools=True).of(round_of("Hmm.", phase="reasoning")).reasoning == "Hmm."  # type: ignore[union-attr]
    assert Pieces(tools=False).of(round_of("Paris")).text == "Paris"  # type: ignore[union-attr]
    assert Pieces(tools=False).of(round_of("")) is None


def test_a_whole_reply_cut_short_gives_only_its_whole_calls_and_the_finish_names_calls():
    cut = final_of('{"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "argu', finish="length")
    reply = whole_reply(cut, tools=True)
    assert [(c.name, c.arguments) for c in reply.calls] == [("a", {})] and reply.content is None
    assert whole_reply(final_of("Paris"), tools=False) == ToolReply(content="Paris")
    calls = final_of("{}", parsed=ToolReply((ToolCall("a", {}),)))
    assert finish_name(calls, {"eos": "stop"}, "stop", "tool_calls") == "tool_calls"
    assert finish_name(final_of("x", "length"), {"length": "length"}, "stop", "tool_calls") == "length"
    assert finish_name(final_of("x", "cancelled"), {"length": "length"}, "stop", "tool_calls") == "stop"


def test_the_ensembles_facts_and_the_prompts_tokens():
    start = StartEvent(("a", "b"), ("a",), {"a": 0.5}, {"a": 12, "b": 15}, False, absent={"c": "gone"}, notes=("n",))
    assert prompt_tokens(start) == 15 and prompt_tokens(None) == 0
    assert round_facts(round_of("x"), vote=False) == {"round": 1, "author": "a", "candidates": 0}
    assert round_facts(round_of("x"))["decision"] == "vote"
    facts = answer_facts(start, final_of("x"))
    assert facts["absent"] == {"c": "gone"} and facts["notes"] == ["n"] and facts["wins"] == {"a": 3}
