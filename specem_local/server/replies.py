"""What an answer says back, whatever the API: the pieces a streamed answer is written in (its
thinking, its text, each tool call once whole), a whole answer's text and calls, how it ended,
its token counts and the ensemble's own facts (``x_specem``). Each API's module
(``openai_format``, ``ollama_format``) only puts these in its own shape, as llama.cpp's server
has one result that writes itself for each API.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specem_local.engine import ReplyStream, ToolCall, ToolReply, whole_part
from specem_local.events import Event, FinalEvent, RoundEvent, StartEvent, TokenLogprob
from specem_local.server.errors import ApiError

ENSEMBLE = "specem"  # the ensemble's model id; each member is also served alone as ``specem/NAME``
# specem's own settings a request may carry on every route (Ollama's in ``options``), checked
# where every setting is: the task whose weights choose among options, and choice points
SPECEM_FIELDS = ("task", "choice_points")


def specem_settings(fields: dict[str, Any]) -> dict[str, Any]:
    """The ``SPECEM_FIELDS`` a request (or Ollama's ``options``) carries, as settings."""
    return {name: fields[name] for name in SPECEM_FIELDS if fields.get(name) is not None}


def member_named(model: Any, members: Sequence[str]) -> str | None:
    """The member a request names to answer alone (``specem/NAME``, Ollama's ``:latest`` tag
    allowed), or None for the ensemble (``specem``, or no model named); any other name is a 404
    naming what is served."""
    if model is None:
        return None
    name = model.strip().removesuffix(":latest") if isinstance(model, str) else None
    if name is not None and name.lower() == ENSEMBLE:
        return None
    if name is not None and name.lower().startswith(f"{ENSEMBLE}/") and name[len(ENSEMBLE) + 1 :] in members:
        return name[len(ENSEMBLE) + 1 :]
    served = ", ".join(repr(f"{ENSEMBLE}/{member}") for member in members)
    raise ApiError(404, f"the model {str(model)[:80]!r} does not exist; this server serves {ENSEMBLE!r} and each "
                        f"member alone: {served}", "model", "not_found_error")  # fmt: skip


@dataclass(frozen=True)
class Piece:
    """What one round adds to a streamed reply, as a client shows it: thinking (before a
    format), text (the answer, or a tool reply's message), and the calls it made whole."""

    event: RoundEvent
    reasoning: str = ""
    text: str = ""
    calls: tuple[tuple[int, ToolCall], ...] = ()  # (the call's index in the reply, the call)


class Pieces:
    """A streamed answer's rounds as the pieces a client shows. With tools, the envelope the
    members write is never shown: its message's text as it comes, each call once it is whole
    (a reply cut by ``max_tokens`` never leaves a client holding arguments that do not parse)."""

    def __init__(self, tools: bool) -> None:
        self.envelope = ReplyStream() if tools else None

    def of(self, event: RoundEvent) -> Piece | None:
        """The round's piece; None when it adds nothing a client shows (punctuation of the
        envelope, an empty segment)."""
        if not event.text:
            return None
        if event.phase == "reasoning":
            return Piece(event, reasoning=event.text)
        if self.envelope is None:
            return Piece(event, text=event.text)
        content, moved = self.envelope.feed(event.text)
        calls = tuple((i, ToolCall(c.name or "", json.loads(c.arguments))) for i, c, _, _ in moved if c.complete)
        return Piece(event, text=content, calls=calls) if content or calls else None


@dataclass
class Whole:
    """A whole answer as a route collects it: its start, its final event, and its tokens with
    their log-probabilities (the answer's rounds, when asked)."""

    start: StartEvent | None = None
    final: FinalEvent | None = None
    tokens: list[TokenLogprob] = field(default_factory=list)

    def add(self, event: Event) -> None:
        if isinstance(event, StartEvent):
            self.start = event
        elif isinstance(event, RoundEvent) and event.phase == "answer":
            self.tokens += event.logprobs
        elif isinstance(event, FinalEvent):
            self.final = event
            if event.escalated:  # the reserve member's answer is the text: the rounds' tokens were not it
                self.tokens = []


def whole_reply(final: FinalEvent, tools: bool) -> ToolReply:
    """A whole answer's text and calls: with tools, its message (or none) and calls; an
    envelope cut short gives what of it is whole, never the envelope itself."""
    if not tools:
        return ToolReply(content=final.text)
    return final.parsed if isinstance(final.parsed, ToolReply) else whole_part(final.text)


def called(final: FinalEvent) -> bool:
    """Whether the answer ended in tool calls (the finish every API names apart)."""
    return isinstance(final.parsed, ToolReply) and bool(final.parsed.calls) and final.finish_reason == "eos"


def finish_name(final: FinalEvent, names: dict[str, str], default: str, calls: str) -> str:
    """How the answer ended, in an API's words: ``calls`` when it ended in tool calls, else
    ``names`` of the ensemble's finish reason (``default`` for the rest)."""
    return calls if called(final) else names.get(final.finish_reason, default)


def prompt_tokens(start: StartEvent | None) -> int:
    """The prompt's tokens, as the member whose tokenizer counted most of them counted them."""
    return max(start.prompt_tokens.values()) if start is not None and start.prompt_tokens else 0


def round_facts(event: RoundEvent, *, vote: bool = True) -> dict[str, Any]:
    """A round's ``x_specem``: who wrote it, among how many candidates (``vote``: how it was
    chosen and the weights after it), how sure it is alone (``sure``), the members lost in it."""
    facts: dict[str, Any] = {"round": event.index, "author": event.author, "candidates": len(event.candidates)}
    if vote:
        facts.update(decision=event.decision, weights=event.weights)
    if event.sure is not None:
        facts["sure"] = round(event.sure, 4)
    return {**facts, **({"lost": event.lost} if event.lost else {})}


def answer_facts(start: StartEvent | None, final: FinalEvent) -> dict[str, Any]:
    """A whole answer's ``x_specem``: who won how many rounds, the weights, the members out of
    it from the start (``absent``) or lost on the way, and what its format serves only
    approximately (``notes``)."""
    return {
        "wins": final.wins,
        "weights": final.weights,
        "rounds": final.rounds,
        "specem_finish_reason": final.finish_reason,
        "absent": start.absent if start is not None else {},
        "lost": final.lost,
        **({"notes": list(start.notes)} if start is not None and start.notes else {}),
        **sureness(final),
    }


def sureness(final: FinalEvent) -> dict[str, Any]:
    """How sure the answer is: ``confidence`` (the calibrated probability that it is right), what
    the calibrator was fitted on, and ``unsure`` (below ``abstain_below``)."""
    if final.confidence is None:
        return {}
    facts = {"confidence": round(final.confidence, 4), "confidence_from": final.confidence_from, "unsure": final.unsure}
    if final.escalated:  # the ensemble was unsure: its reserve member answered instead
        facts.update(escalated=final.escalated, ensemble_text=final.ensemble_text)
    return facts


def logprobs_content(tokens: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    """Tokens with their log-probabilities as OpenAI's ``logprobs.content`` (and Ollama's
    ``logprobs``) have them: token, logprob, bytes, and the most likely tokens in its place."""
    return [
        {
            "token": t.token,
            "logprob": t.logprob,
            "bytes": list(t.bytes),
            "top_logprobs": [{"token": text, "logprob": lp, "bytes": list(raw)} for text, lp, raw in t.top],
        }
        for t in tokens
    ]
