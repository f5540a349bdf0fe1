"""An answer's request as one value, checked once where it enters.

``Ensemble.prepare`` turns what a front end was given (a prompt or a conversation, ``[ensemble]``
overrides, a format or tools) into an ``AnswerRequest``: the settings after validation, the
output format with its grammar compiled, the conversation as the members read it (tool calls
rendered, the format's instruction said), every member's prompt tokens (checked to leave room
to answer) and the weights the answer starts from. Everything after works from that value: a
bad value is a ``SettingError`` (or ``PromptTooLong``) before the request waits for the models,
and nothing is compiled, rendered, tokenized or read from the weight store twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specem_local.engine.evidence import Calibrator
from specem_local.engine.formats import OutputFormat
from specem_local.engine.learned import StartingWeights
from specem_local.engine.member import EXTRA_TOKENS, Member
from specem_local.engine.prompting import Message, as_messages, split_partial_answer
from specem_local.engine.thinking import MIN_REASONING, ThinkPlan, answer_messages, fitting_budget, reasoning_room
from specem_local.engine.tools import render_messages
from specem_local.errors import SettingError, SpecemError
from specem_local.settings import EnsembleSettings

Prompt = str | list[Message] | list[dict[str, Any]]


class PromptTooLong(SpecemError):
    """The conversation leaves no room to answer in a member's context (OpenAI's
    ``context_length_exceeded``)."""

    field = "messages"
    code = "context_length_exceeded"


@dataclass(frozen=True)
class AnswerRequest:
    """Everything one answer needs, checked: run it with ``Ensemble.stream(request)``."""

    messages: tuple[Message, ...]  # as the members read them: tool calls rendered, the format's instruction said
    settings: EnsembleSettings
    output_format: OutputFormat | None
    members: tuple[Member, ...]  # the members asked to take part
    prompts: dict[str, tuple[int, ...]]  # each member's prompt tokens
    start: StartingWeights  # the weights it starts from (``weights_version``: the store as read)
    weights_version: int = 0
    prefix: str = ""  # the start of the answer to continue (a trailing assistant message)
    notes: tuple[str, ...] = field(default=())  # what the format serves only approximately, in words
    think: ThinkPlan = field(default_factory=ThinkPlan)  # thinking before the format (its budget in tokens; 0: none)
    asked: tuple[Message, ...] = ()  # the conversation as asked (no format instruction): the thinking builds on it
    cells: int = 0  # KV cells the answer may hold at most, in any member, in every phase: what its place reserves
    calibrator: Calibrator | None = None  # how sure the answer is, from its evidence (evidence.py)
    reserve: Member | None = None  # who answers instead when the answer is unsure (escalate_below)
    options: Any = None  # an answer among options: its ``option_answers.OptionPlan`` (scored, not drafted)
    prediction: str = ""  # what the answer is expected to repeat: drafted faster, the same text (prediction.py)


def conversation(prompt: Prompt, settings: EnsembleSettings, output_format: OutputFormat | None) -> list[Message]:
    """The conversation as asked: earlier tool calls and results rendered, the system prompt
    first (the format's instruction is added by the caller, for the phase that writes it)."""
    if isinstance(prompt, list) and any(isinstance(m, dict) and _uses_tools(m) for m in prompt):
        envelope = output_format is not None and output_format.kind == "tools"
        prompt = render_messages(prompt, envelope=envelope)  # type: ignore[arg-type]
    return as_messages(prompt, settings.system_prompt)


def _uses_tools(message: dict[str, Any]) -> bool:
    return message.get("role") == "tool" or bool(message.get("tool_calls"))


def round_cells(settings: EnsembleSettings, drafters: int, past_segment: int = EXTRA_TOKENS) -> int:
    """KV cells one round may add to a member's memory at once: every drafter's segment (and the
    ``past_segment`` tokens past it that finish a word), held together while they are verified.
    A prompt is refused when not even the segments alone fit (``past_segment=0``): near the end
    of a context the segments shrink until they fit."""
    return max(drafters, settings.draft_budget, 1) * (settings.segment_tokens + past_segment) + 1


def prompt_tokens(member: Member, messages: list[Message] | tuple[Message, ...], settings: EnsembleSettings,
                  drafters: int, formatted: bool, after: int = 0) -> tuple[int, ...]:  # fmt: skip
    """The prompt in this member's tokens, checked to leave room for one whole round (and for
    ``after`` more tokens that will come before the answer: the reasoning, when it thinks first)."""
    model = member.model
    bos = model.bos_token if model.adds_bos else None
    tokens = member.prompt_format.tokens(
        list(messages), model, bos_token=bos, native_tools=settings.tool_turns == "native"
    )
    needed = round_cells(settings, drafters, past_segment=0)
    if needed >= model.n_ctx:
        raise SpecemError(
            f"segment_tokens = {settings.segment_tokens} does not fit the context of {member.name} ({model.n_ctx} "
            f"tokens for {max(drafters, settings.draft_budget, 1)} drafters' segments at once); lower segment_tokens "
            "or raise n_ctx in models.toml"
        )
    if len(tokens) + after + needed > model.n_ctx:
        what = "the conversation with the format's instructions" if formatted else "the conversation"
        advice = "use a shorter schema or fewer tools" if formatted else "start a new chat"
        raise PromptTooLong(
            f"{what} ({len(tokens)} tokens for {member.name}) leaves no room to answer in its context of "
            f"{model.n_ctx} tokens (a round needs {needed}); raise n_ctx in models.toml or {advice}"
        )
    return tuple(tokens)


def fitted_thinking(
    plan: ThinkPlan,
    members: list[Member],
    asked: list[Message],
    output_format: OutputFormat,
    settings: EnsembleSettings,
    drafters: int,
) -> tuple[ThinkPlan, int]:
    """Thinking first, checked against the format's phase before anything runs: the members then
    read the conversation, their reasoning (up to ``thinking.reasoning_room`` tokens of it), a
    bridge and the format's instruction. Returns the plan (a default budget shrunk to what fits, or
    no thinking if little fits; an explicit one that does not fit is a ``SettingError`` naming
    ``think``) and the longest prompt of that phase with its reasoning, in tokens. A conversation
    whose format's instruction alone leaves no room is ``PromptTooLong``, as without thinking."""
    if settings.think_bridge == "same-turn":  # one turn: the reasoning is part of the answer's tokens
        return plan, 0
    bridged = answer_messages(asked, "", output_format, "budget")
    base = {m.name: len(prompt_tokens(m, bridged, settings, drafters, True)) for m in members}
    room = min(m.model.n_ctx - base[m.name] - round_cells(settings, drafters, past_segment=0) for m in members)
    budget = plan.budget
    if reasoning_room(budget, settings.segment_tokens) > room:
        if plan.explicit:
            raise SettingError(
                f"think: a reasoning budget of {budget} tokens does not fit beside the format's instruction in the "
                f"members' context (room for about {fitting_budget(room, settings.segment_tokens)}); think less, "
                "use a shorter schema or raise n_ctx in models.toml",
                "think",
            )
        budget = fitting_budget(room, settings.segment_tokens)
        budget = budget if budget >= MIN_REASONING else 0
    longest = max(base.values()) + reasoning_room(budget, settings.segment_tokens) if budget else 0
    return ThinkPlan(budget, plan.explicit), longest


def checked_prefix(messages: list[Message], output_format: OutputFormat | None, accepts: Callable[[str], bool]) -> str:
    """The start of the answer to continue when the answer has a format (it is part of the
    format's text), checked to match it (``accepts``)."""
    prefix = split_partial_answer(messages)[1] if output_format is not None else ""
    if prefix and not accepts(prefix):
        raise SettingError("messages: the start of the answer does not match the format", "messages")
    return prefix
