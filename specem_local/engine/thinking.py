"""Think first, then the format (issue 46): an answer with a format (a schema, any JSON, a grammar,
a regex, tools) is first written freely, by the members' ordinary drafting and voting with no
matcher, under a reasoning budget in tokens; then the format's constrained phase writes the
answer. Small models squeeze their working into a JSON string and then write a number (GSM8K:
33 of 120 plain, 10 as JSON); reasoning first, as Ollama, llama.cpp's server and vLLM do for
reasoning models, gives the format a worked answer to copy.

This module holds the plan as plain functions: how much to think (``reasoning_budget``), what
the members are told in each phase, and the bridge from one to the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specem_local.engine.formats import OutputFormat, with_instruction
from specem_local.engine.prompting import Message
from specem_local.errors import SettingError
from specem_local.events import Switch

LEVELS = {"low": 128, "medium": 256, "high": 512}  # tokens of thinking, as reasoning_effort's words
OFF = ("none", "off", "false")
MAX_BUDGET = 32_768
MIN_ANSWER = 64  # tokens kept for the formatted answer out of max_tokens, at least
MIN_REASONING = 32  # a default budget squeezed below this by max_tokens is no thinking at all
CUT = "That is enough thinking."


@dataclass(frozen=True)
class ThinkPlan:
    """How an answer thinks before its format: ``budget`` tokens (0: not at all); ``explicit``:
    the caller named the budget (a default is fitted to the room there is instead)."""

    budget: int = 0
    explicit: bool = False


def reasoning_room(budget: int, segment_tokens: int) -> int:
    """Tokens the reasoning may take in any member's prompt of the format's phase: the budget and
    the round that crosses it, in the writer's tokens, and a quarter more for a member whose
    tokenizer splits the same text finer; the bridge's few tokens."""
    return (budget + segment_tokens) * 5 // 4 + 16


def fitting_budget(room: int, segment_tokens: int) -> int:
    """The largest budget whose ``reasoning_room`` fits in ``room`` tokens (0 if none does)."""
    return max((room - 16) * 4 // 5 - segment_tokens, 0)


def plan(think: Any, max_tokens: int, default_budget: int, formatted: bool, field: str = "think") -> ThinkPlan:
    """The plan for ``think`` (None: the default; True / False; "low" / "medium" / "high" or
    "none"; a number of tokens), checked: a ``SettingError`` names ``field``. Without a format
    the value is checked and changes nothing. An explicit budget that leaves the answer less
    than ``MIN_ANSWER`` tokens of ``max_tokens`` is an error naming the numbers; the default (and
    ``True``) is fitted into what ``max_tokens`` leaves instead (and is off if little is left)."""
    budget, explicit = _budget(think, default_budget, field)
    if not formatted or budget == 0:
        return ThinkPlan(0)
    room = max_tokens - MIN_ANSWER
    if explicit and budget > room:
        raise SettingError(
            f"{field}: a reasoning budget of {budget} tokens leaves the answer {max(max_tokens - budget, 0)} of "
            f"max_tokens = {max_tokens} (it needs at least {MIN_ANSWER}); raise max_tokens to {budget + MIN_ANSWER} "
            "or think less",
            field,
        )
    if explicit:
        return ThinkPlan(budget, explicit=True)
    budget = min(budget, room)
    return ThinkPlan(budget if budget >= MIN_REASONING else 0)


def _budget(think: Any, default_budget: int, field: str) -> tuple[int, bool]:
    """(tokens, whether the caller named them) for a ``think`` value."""
    if think is None:
        return default_budget, False
    if think is True:  # think, as much as fits
        return default_budget or LEVELS["medium"], False
    if think is False:
        return 0, True
    if isinstance(think, str):
        word = think.strip().lower()
        if word in OFF:
            return 0, True
        if word in LEVELS:
            return LEVELS[word], True
        raise SettingError(f"{field} must be true, false, one of {', '.join(LEVELS)} or none, or a number of tokens; "
                           f"got {think[:40]!r}", field)  # fmt: skip
    if isinstance(think, int) and not isinstance(think, float):
        if not 0 <= think <= MAX_BUDGET:
            raise SettingError(f"{field}: a reasoning budget must be 0 to {MAX_BUDGET:,} tokens; got {think}", field)
        return think, True
    raise SettingError(f"{field} must be true, false, a level or a number of tokens, not {type(think).__name__}", field)


def reasoning_messages(messages: list[Message], output_format: OutputFormat, bridge: str) -> list[Message]:
    """What the members read while they think. ``new-turn``: the conversation as asked (with
    tools, the tools too: a model thinks about which function to call with what); the format is
    asked after. ``same-turn``: the format's instruction now, after a word to think first."""
    think_first = "First think it through in plain words; the answer in that form comes after."
    if bridge == "same-turn":
        return _told(messages, f"{output_format.instruction()}\n{think_first}")
    if output_format.kind != "tools":
        return messages
    return _told(messages, f"{output_format.instruction()}\n{think_first}")


def answer_messages(
    messages: list[Message], reasoning: str, output_format: OutputFormat, switch: Switch
) -> list[Message]:
    """``new-turn``: what the members read for the formatted answer: the conversation, their
    reasoning as the assistant's turn, then a new short user turn asking for the final answer in
    the format (a budget that cut the reasoning is said first)."""
    cut = f"{CUT} " if switch == "budget" else ""
    now = f"{cut}Now give the final answer, with at most one short sentence of explanation."
    asked = [*messages, Message("assistant", reasoning), Message("user", now)]
    return with_instruction(asked, output_format)


def same_turn_bridge(switch: Switch) -> str:
    """``same-turn``: the text committed to every member between its reasoning and the answer."""
    return f"\n\n{CUT}\nFinal answer:\n" if switch == "budget" else "\n\nFinal answer:\n"


def _told(messages: list[Message], said: str) -> list[Message]:
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last is None:
        return [*messages, Message("user", said)]
    return [*messages[:last], Message("user", f"{messages[last].content}\n\n{said}"), *messages[last + 1 :]]
