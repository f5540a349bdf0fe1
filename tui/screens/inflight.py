"""The answer the chat screen is writing, as one value (``ChatScreen.inflight``): its stream,
where it is shown, what it answers and what runs when it ends."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from specem_local.engine import AnswerStream
from specem_local.storage.chats import Turn
from specem_local.storage.history import AnswerRecord
from specem_tui.widgets.answer import AnswerView, UserMessage


@dataclass
class InFlight:
    """The answer being written: its stream, where it is shown, what it answers and what runs
    when it ends. The chat app records it on its UI thread, as it draws it: the turn on screen
    is the record's turn."""

    stream: AnswerStream
    view: AnswerView
    asked: UserMessage | None = None  # the question it answers (None: a version of an answer)
    record: AnswerRecord | None = None  # the answer as the history keeps it
    after: Callable[[Turn], None] | None = None  # runs when it ends (done, stopped, failed after a segment)
    taken_back: Callable[[], None] | None = None  # runs when it fails before its first segment
    tool_rounds: int | None = None  # offered MCP tools: the rounds of results before it (None: not offered)
    streamed: int = 0  # its rounds so far
    members_said: set[str] = field(default_factory=set)  # members said to be out of it
