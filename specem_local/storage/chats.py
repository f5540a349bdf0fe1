"""A conversation in memory: a chat is a list of turns (the user's messages and the ensemble's
answers, each answer with its rounds and final record, the engine's own event types). The
history (``history.py``) stores them; ``chat_files.py`` reads and writes them as files.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from specem_local.events import Event, FinalEvent, RoundEvent

EVENT_FORMAT = 2  # the version of the event records a chat holds (chat files of version 1 are upgraded)
INTERRUPTED = "interrupted: the program ended before the answer was complete"


GIVEN = "given"  # a turn's kind: a system or assistant message sent with a request, not written here


@dataclass
class Turn:
    role: str  # "user", "assistant", "system" or "tool" (a function's result); an assistant's tool calls
    content: str  # are its envelope, {"tool_calls": [...]}, as the ensemble writes them
    rounds: list[RoundEvent] = field(default_factory=list)
    final: FinalEvent | None = None
    error: str | None = None  # the answer failed after it began, or was interrupted; the text so far is kept
    kind: str = ""  # how an answer came: "" (asked), "regenerated", "continued", "alone: NAME"; "edited"; GIVEN
    alternatives: list[Turn] = field(default_factory=list)  # other versions of this message, oldest first
    message_id: int | None = None  # its row in the history, once saved
    prefix: str = ""  # an answer continued from given text: that text (its events carry only the rest)

    @property
    def stopped(self) -> bool:
        return self.final is not None and self.final.finish_reason == "cancelled"

    @property
    def ending(self) -> str | None:
        """Why the answer ended early, in words ("stopped", "failed: ..."); None otherwise."""
        if self.stopped:
            return "stopped"
        return f"failed: {self.error}" if self.error else None

    @property
    def done(self) -> bool:
        """Finished, stopped or failed, or given: nothing more will stream into it."""
        return self.final is not None or self.error is not None or self.kind == GIVEN

    def add(self, event: Event) -> None:
        """Take one of the answer's events: a round adds its segment (a reasoning round adds to
        ``reasoning``, not to the answer), the final record sets the whole text (a stop string
        may have cut it); the start event changes nothing."""
        if isinstance(event, RoundEvent):
            self.rounds.append(event)
            if event.phase == "answer":
                self.content += event.text
        elif isinstance(event, FinalEvent):
            self.final = event
            self.content = self.prefix + event.text

    @property
    def reasoning(self) -> str:
        """What the answer thought before its format (think first), kept with it."""
        if self.final is not None and self.final.reasoning:
            return self.final.reasoning
        return "".join(event.text for event in self.rounds if event.phase == "reasoning")

    @property
    def wins(self) -> dict[str, int]:
        """The segments each model wrote in this version. A version continued from a pick counts
        its kept rounds and the picked segment too (its final record counts only what streamed
        after them); a record without rounds has its final record's count."""
        counts = dict.fromkeys(self.final.wins, 0) if self.final is not None else {}
        if not self.rounds:
            return dict(self.final.wins) if self.final is not None else counts
        for event in self.rounds:
            if event.author:  # "": text a constraint forced
                counts[event.author] = counts.get(event.author, 0) + 1
        return counts

    def versions(self) -> list[Turn]:
        """This message and its other versions, oldest first (this one, the shown one, is the
        newest unless another was chosen to be shown)."""
        return sorted([self, *self.alternatives], key=lambda turn: turn.message_id or 1 << 62)


def with_version_shown(shown: Turn, version: Turn) -> Turn:
    """``version`` as the message shown, holding every other version of ``shown`` (``shown``
    included) as its alternatives; returns it."""
    others = [turn for turn in shown.versions() if turn is not version]
    for turn in others:
        turn.alternatives = []
    version.alternatives = others
    return version


def picked_start(answer: Turn, round_index: int, text: str, model: str) -> Turn:
    """A new version of ``answer`` that keeps its rounds before ``round_index`` and puts the
    picked candidate (``text`` by ``model``) in that round's place: the start of an answer to
    continue from there (its ``prefix``)."""
    kept = answer.rounds[:round_index]
    picked = dataclasses.replace(answer.rounds[round_index], text=text, author=model, decision="picked")
    prefix = "".join(event.text for event in kept) + text
    return Turn("assistant", prefix, [*kept, picked], kind="continued", prefix=prefix)


_FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.MULTILINE | re.DOTALL)


def code_blocks(text: str) -> list[str]:
    """The fenced code blocks of a Markdown answer, without their fences."""
    return [match.group(2).rstrip("\n") for match in _FENCE.finditer(text)]


def new_chat_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


@dataclass
class Chat:
    id: str = field(default_factory=new_chat_id)
    title: str = "New chat"
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    turns: list[Turn] = field(default_factory=list)
    origin: str = "chat"  # which front end started it: chat, run, serve, api (a script), import

    def messages(self, turns: int | None = None) -> list[dict[str, Any]]:
        """The conversation as the engine takes it (stopped answers included as they stand; of
        each message, the version shown); ``turns``: only the first so many. An agent loop comes
        back as OpenAI's messages: the calls with ids, each result answering the call in its place."""
        out: list[dict[str, Any]] = []
        waiting: list[str] = []  # ids of the calls not answered yet, in order
        for turn in self.turns[:turns]:
            if turn.role == "tool":
                answers = {"tool_call_id": waiting.pop(0)} if waiting else {}
                out.append({"role": "tool", "content": turn.content, **answers})
                continue
            calls = called(turn.content) if turn.role == "assistant" else []
            if calls:
                waiting = [f"call_{len(out)}_{number}" for number in range(len(calls))]
                made = [{"id": i, "type": "function", "function": c} for i, c in zip(waiting, calls)]
                out.append({"role": "assistant", "content": None, "tool_calls": made})
            elif turn.content or turn.role == "user":
                out.append({"role": turn.role, "content": turn.content})
        return out


def called(text: str) -> list[dict[str, Any]]:
    """The calls an answer's envelope makes, as OpenAI's functions (arguments as JSON text); []
    for any other text."""
    if not text.startswith('{"tool_calls": '):
        return []
    try:
        calls = json.loads(text)["tool_calls"]
        return [{"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)} for c in calls]
    except (ValueError, KeyError, TypeError):
        return []


def title_for(text: str) -> str:
    """A chat's title from its first message: the first line, at most 50 characters."""
    return (text.strip().splitlines() or ["New chat"])[0][:50]
