"""An answer's phases, named as llama.cpp's server names a slot's state: ``Reasoning`` (thinking
first, in free text, under a budget: ``thinking.py``) and ``Writing`` (the answer itself, under
its output format's matcher when it has one). A round asks its phase what it may do; the switch
from one to the other is the reasoning phase's, and nothing else about it lives elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specem_local.backend.protocol import ContextFull
from specem_local.engine import thinking
from specem_local.engine.choice_points import ChoicePoint, allowed_options, choice_point
from specem_local.engine.formats import FormatMatcher, OutputFormat, member_matcher
from specem_local.engine.member import Member
from specem_local.engine.request import AnswerRequest, PromptTooLong, prompt_tokens
from specem_local.events import Phase, Switch

RunEach = Callable[..., list]  # RoundLoop.run_each: a function over members' indices


class Writing:
    """The answer itself: free text, or text its output format's matcher accepts (each member
    drafts under a matcher over its own tokens, and the committed text is matched once more)."""

    name: Phase = "answer"

    def __init__(self, output_format: OutputFormat | None, prefix: str) -> None:
        self.output_format = output_format
        self.prefix = prefix  # the start of an answer to continue: part of the format's text
        self.matcher = FormatMatcher(output_format) if output_format is not None else None
        if self.matcher is not None and prefix:
            self.matcher.commit(prefix)

    def arm(self, members: list[Member]) -> None:
        """Give each member its matcher (none without a format)."""
        if self.output_format is None:
            return
        for member in members:
            member.matcher = member_matcher(member.model.grammar_tokenizer(), self.output_format)
            if self.prefix:
                member.matcher.consume_tokens(member.model.tokenize(self.prefix))

    def forced(self) -> str:
        """Text the format forces next (a key, punctuation): committed without a round."""
        return self.matcher.forced() if self.matcher is not None else ""

    def choices(self, written: str) -> ChoicePoint | None:
        """The options of the value the schema's answer reaches after ``written`` (what the phase
        has committed), when it allows only a few (``choice_points.py``) and the format allows two
        or more: scored, not drafted."""
        schema = self.output_format.schema if self.output_format is not None else None
        point = choice_point(schema, self.prefix + written) if schema is not None else None
        matcher = self.matcher
        if point is None or matcher is None:
            return None
        kept = allowed_options(point.options, lambda text: matcher.accepts(text[len(point.begun) :], False))
        return ChoicePoint(kept, point.begun) if kept is not None else None

    def allows(self, text: str, ended: bool) -> bool:
        """Whether a candidate may win (one the format does not allow never can)."""
        return self.matcher is None or self.matcher.accepts(text, ended)

    def commit(self, text: str) -> bool:
        """Add the winning text; whether the format is now whole (nothing more is allowed)."""
        if self.matcher is None:
            return False
        self.matcher.commit(text)
        return self.matcher.complete

    @property
    def formatted(self) -> bool:
        return self.output_format is not None


@dataclass(frozen=True)
class Reasoning:
    """Thinking first: free text, no matcher, until the members end it or ``budget`` tokens are
    written; then the switch to the format's phase."""

    budget: int
    name: Phase = "reasoning"

    def forced(self) -> str:
        return ""

    def choices(self, _written: str) -> None:
        return None

    def allows(self, _text: str, _ended: bool) -> bool:
        return True

    def commit(self, _text: str) -> bool:
        return False

    formatted = False

    def over(self, tokens: int) -> bool:
        return tokens >= self.budget

    def switch(
        self, request: AnswerRequest, members: list[Member], following: list[int], reasoning: str, why: Switch,
        drafters: int, run_each: RunEach,
    ) -> Writing:  # fmt: skip
        """The format's phase after the reasoning, each following member ready for it: a bridge
        every member reads (``think_bridge``: a new short user turn asking for the format, or
        text in the same assistant turn). ``ContextFull`` when a member's prompt of that phase
        finds no room (the reasoning filled its context); a member lost here leaves the answer."""
        assert request.output_format is not None
        if request.settings.think_bridge == "same-turn":
            bridge = thinking.same_turn_bridge(why)
            run_each(lambda i: members[i].commit(-1, bridge, None, None), following, losses_raise=False)
        else:
            asked = list(request.asked)
            messages = thinking.answer_messages(asked, reasoning, request.output_format, why)
            try:
                prompts = {i: prompt_tokens(members[i], messages, request.settings, drafters, True) for i in following}
            except PromptTooLong as error:
                raise ContextFull(str(error)) from None
            run_each(lambda i: members[i].start(list(prompts[i]), True), following, losses_raise=False)
        answering = Writing(request.output_format, "")
        answering.arm(members)
        return answering


def first_phase(request: AnswerRequest) -> Writing | Reasoning:
    """Where an answer begins: thinking first when its request plans it, else the answer."""
    if request.think.budget:
        return Reasoning(request.think.budget)
    return Writing(request.output_format, request.prefix)


def unarm(members: list[Member]) -> None:
    """Take the matchers back when the answer ends."""
    for member in members:
        member.matcher = None
