"""An answer's phases to the letter (engine/phases.py, on fake members): the reasoning budget at
its exact edge, the exact text every member reads across each bridge at the switch, the new
turn decoded past what each member already holds, the start of an answer to continue already
part of the format's text (and of each member's matcher), free text and reasoning under no
matcher, where an answer begins, and a member lost at the switch."""

from __future__ import annotations

import pytest

from specem_local.backend.protocol import MemberLost
from specem_local.engine.formats import output_format_from
from specem_local.engine.phases import Reasoning, Writing, first_phase, unarm
from specem_local.engine.request import AnswerRequest, prompt_tokens
from specem_local.engine.thinking import answer_messages
from tests.engine.conftest import QUESTION, fake_ensemble
from tests.engine.test_thinking import REPLY, SCHEMA, WORKING, answer, thinker

REASONING = "Six times seven: 6 * 7 = 42."
NOW = "Now give the final answer, with at most one short sentence of explanation."


# -- the budget ------------------------------------------------------------------------------------


def test_the_reasoning_is_over_at_exactly_its_budget_and_not_one_token_before():
    assert not Reasoning(10).over(9)
    assert Reasoning(10).over(10)
    assert Reasoning(10).over(11)


@pytest.mark.parametrize("budget", [10, 20])
def test_a_budget_of_n_tokens_switches_to_the_format_after_exactly_n_tokens_of_thinking(budget):
    rounds, final = answer(think=budget)  # segments of 10 tokens: the budget ends a round
    assert final.switched == "budget" and final.reasoning_tokens == budget
    assert sum(1 for r in rounds if r.phase == "reasoning") == budget // 10
    assert final.parsed == {"answer": 42}


# -- the switch ------------------------------------------------------------------------------------


def prepared(bridge: str) -> AnswerRequest:
    with fake_ensemble(thinker("a"), thinker("b"), reasoning_budget=64) as ensemble:
        return ensemble.prepare(QUESTION, schema=SCHEMA, max_tokens=200, think_bridge=bridge)


def thought(request: AnswerRequest) -> list:
    """Two members that read the reasoning phase's prompt and then wrote ``REASONING``, each
    decode after it recorded as the positions of its rows."""
    members = [thinker("a"), thinker("b")]
    for member in members:
        member.start(list(request.prompts[member.name]))
        member.commit(-1, REASONING, None, None)
        member.model.decoded = []
        member.model.on_decode = lambda model, rows: model.decoded.append([r.position for r in rows])
    return members


def run_each(function, items, *, losses_raise=True):
    return [function(i) for i in items]


def shared_start(before: list[int], after: list[int]) -> int:
    same = 0
    for old, new in zip(before, after):
        if old != new:
            break
        same += 1
    return min(same, len(after) - 1)


def text_of(member) -> str:
    return b"".join(member.model.token_bytes(t) for t in member.model.sequence(0)).decode()


@pytest.mark.parametrize(
    ("why", "bridge"),
    [("budget", "\n\nThat is enough thinking.\nFinal answer:\n"), ("eos", "\n\nFinal answer:\n")],
)
def test_in_the_same_turn_every_member_reads_its_reasoning_then_exactly_the_bridge_for_why_it_ended(why, bridge):
    request = prepared("same-turn")
    members = thought(request)
    held = [list(m.tokens) for m in members]
    phase = first_phase(request)
    assert isinstance(phase, Reasoning)
    answering = phase.switch(request, members, [0, 1], REASONING, why, 2, run_each)
    for member, before in zip(members, held):
        assert member.tokens == before + member.model.tokenize(bridge)
        assert text_of(member).endswith(REASONING + bridge)
        assert member.model.decoded == [list(range(len(before), len(member.tokens)))]  # the bridge alone
        assert member.matcher is not None
    assert isinstance(answering, Writing) and answering.formatted and answering.forced() == '{"answer": '


@pytest.mark.parametrize(("why", "cut"), [("budget", "That is enough thinking. "), ("eos", "")])
def test_in_a_new_turn_every_member_reads_its_reasoning_then_the_ask_for_the_final_answer_in_the_format(why, cut):
    request = prepared("new-turn")
    members = thought(request)
    held = [list(m.tokens) for m in members]
    phase = first_phase(request)
    assert isinstance(phase, Reasoning)
    answering = phase.switch(request, members, [0, 1], REASONING, why, 2, run_each)
    told = answer_messages(list(request.asked), REASONING, request.output_format, why)
    assert told[-1].content == f"{cut}{NOW}\n\n{request.output_format.instruction()}"
    for member, before in zip(members, held):
        expected = list(prompt_tokens(member, told, request.settings, 2, True))
        assert member.tokens == expected and member.model.sequence(0) == expected
        assert REASONING in text_of(member) and text_of(member).count(NOW) == 1
        common = shared_start(before, expected)
        assert common > len(request.prompts[member.name])  # the conversation and the reasoning held
        assert member.model.decoded == [list(range(common, len(expected)))]  # past what it holds, not again
        assert member.matcher is not None
    assert isinstance(answering, Writing) and answering.formatted and answering.forced() == '{"answer": '


# -- the start of an answer to continue ------------------------------------------------------------


def test_the_start_of_an_answer_to_continue_is_already_part_of_the_formats_text():
    schema = output_format_from(schema=SCHEMA)
    continued = Writing(schema, '{"answer": ')
    assert continued.forced() == ""
    assert continued.allows("42}", True) and not continued.allows('{"answer": 42}', True)
    assert continued.allows("4", False) and not continued.allows("4", True)  # allowed, but not as its end
    assert continued.commit("42}") is True
    fresh = Writing(schema, "")
    assert fresh.forced() == '{"answer": ' and not fresh.allows("42}", True)


def test_each_member_armed_to_continue_an_answer_has_read_its_start_and_accepts_only_the_rest():
    members = [thinker("a"), thinker("b")]
    Writing(output_format_from(schema=SCHEMA), '{"answer": ').arm(members)
    for member in members:
        assert member.matcher is not None and not member.matcher.is_error()
        assert member.matcher.validate_tokens(member.model.tokenize("42}")) == 3
        assert member.matcher.validate_tokens(member.model.tokenize('{"')) == 0
    unarm(members)
    assert [m.matcher for m in members] == [None, None]


def test_free_text_has_no_matcher_forces_nothing_allows_anything_and_is_never_whole():
    free = Writing(None, "")
    members = [thinker("a")]
    free.arm(members)
    assert members[0].matcher is None and free.matcher is None and not free.formatted
    assert free.forced() == "" and free.allows("anything at all", True) and free.commit("Paris") is False
    assert free.name == "answer"


def test_reasoning_is_free_text_forcing_nothing_allowing_anything_and_never_whole():
    thinking_phase = Reasoning(64)
    assert thinking_phase.name == "reasoning" and not thinking_phase.formatted
    assert thinking_phase.forced() == "" and thinking_phase.allows("", False) and thinking_phase.commit("x") is False


def test_an_answer_begins_thinking_for_exactly_its_planned_budget_or_writing_from_its_start():
    request = prepared("new-turn")
    assert first_phase(request) == Reasoning(request.think.budget) and request.think.budget == 64
    with fake_ensemble(thinker("a"), thinker("b"), reasoning_budget=0) as ensemble:
        continued = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": '{"answer": '}]
        request = ensemble.prepare(continued, schema=SCHEMA, max_tokens=200)
    phase = first_phase(request)
    assert isinstance(phase, Writing) and phase.prefix == '{"answer": ' and phase.forced() == ""


# -- a member lost at the switch ---------------------------------------------------------------------


@pytest.mark.parametrize("bridge", ["same-turn", "new-turn"])
def test_a_member_lost_at_the_switch_leaves_and_the_others_write_the_format_after_the_same_reasoning(bridge):
    """The switch goes on for the others (its losses do not raise): the round loop must not take
    the switch again, with the reasoning already moved aside and the bridge read twice."""
    lost = thinker("a")
    step = "commit" if bridge == "same-turn" else "start"
    original, calls = getattr(lost, step), []

    def losing(*args, **kwargs):
        calls.append(args)
        at_switch = "Final answer" in args[1] if step == "commit" else len(calls) == 2
        if at_switch:
            lost.model.lose("gone at the switch")
            raise MemberLost("gone at the switch")
        return original(*args, **kwargs)

    setattr(lost, step, losing)
    with fake_ensemble(lost, thinker("b"), reasoning_budget=256) as ensemble:
        final = ensemble.stream(QUESTION, schema=SCHEMA, max_tokens=200, think_bridge=bridge).final()
    assert final.lost == {"a": "gone at the switch"}
    assert final.reasoning == WORKING and final.text == REPLY and final.finish_reason == "eos"
