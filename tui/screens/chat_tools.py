"""MCP servers' tools in the chat (the settings' "MCP servers" config): the ensemble is offered
their tools with each question; when an answer calls some, the chat runs them (in a worker:
a call blocks), shows each result as a "Tool result" message under the call, keeps both in the
history, and asks the ensemble again with the results, as ``specem run --mcp`` does, up to
``CHAIN_LIMIT`` rounds of results (then a message that reads them). Esc while the calls run
stops the loop after the call in progress (each call not run is said to the models as not
run). The tools are the app's (``ChatTools``): one set for every chat, started and
closed off the UI thread."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from textual import work
from textual.containers import VerticalScroll
from textual.message import Message

from specem_local.engine import AnswerStream, FormatAsk, OutputFormat, ToolCall, ToolReply
from specem_local.errors import SpecemError
from specem_local.mcp import McpTools
from specem_local.storage.chats import GIVEN, Chat, Turn
from specem_local.storage.history import AnswerRecord, History
from specem_tui.screens.inflight import InFlight
from specem_tui.widgets.answer import AnswerView

CHAIN_LIMIT = 5  # rounds of results, then an answer that reads them (as specem run's default --chain-limit)
STOPPED = "error: the user stopped the calls before this one ran; it was not run"


@dataclass(frozen=True)
class ChatTools:
    """The tools of an MCP config as the chat offers them, their formats compiled once: calls
    or a message (``offer``), a message only (``answer``, after ``CHAIN_LIMIT`` rounds)."""

    path: str
    tools: McpTools
    offer: OutputFormat | None
    answer: OutputFormat | None

    @classmethod
    def open(cls, path: str, tools: McpTools) -> ChatTools:
        """Start the config's servers (blocks: a worker's; ``tools.close()`` from another thread
        cuts it short); tools the engine refuses are a ``SpecemError`` with nothing left running."""
        try:
            tools.open()
            if not tools.specs:
                return cls(path, tools, None, None)
            offer = FormatAsk(tools=tools.specs).compiled()
            answer = FormatAsk(tools=tools.specs, tool_choice="none").compiled()
        except BaseException:
            tools.close()
            raise
        return cls(path, tools, offer, answer)

    def format_after(self, rounds: int) -> OutputFormat | None:
        return self.offer if rounds < CHAIN_LIMIT else self.answer


@dataclass
class Calling:
    """The calls of one answer being run: how many rounds of results the loop has had, and
    whether the user stopped it."""

    rounds: int
    stopped: bool = False
    results: list[Turn] = field(default_factory=list)


class ToolCalled(Message):
    def __init__(self, call: ToolCall, result: str) -> None:
        super().__init__()
        self.call = call
        self.result = result


class CallsDone(Message):
    pass


class ToolLoop:
    """Mixed into ``ChatScreen``, whose state and answer plumbing it uses."""

    app: Any
    chat: Chat
    history: History
    colours: dict[str, str]
    calling: Calling | None
    open_answer: Callable[..., AnswerStream | None]
    begin: Callable[..., None]
    notify: Callable[..., None]
    query_one: Callable[..., Any]
    post_message: Callable[[Message], bool]

    def chat_tools(self) -> ChatTools | None:
        """The app's MCP tools, when they are up and offer something."""
        tools = getattr(self.app, "chat_tools", None)
        return tools if tools is not None and tools.offer is not None else None

    def tools_format(self, rounds: int = 0) -> OutputFormat | None:
        tools = self.chat_tools()
        return tools.format_after(rounds) if tools is not None else None

    def go_on_with_calls(self, inflight: InFlight) -> None:
        """An answer offered tools has ended: if it is the last of the chat and calls some, run
        them (results are shown as they come), then ask again."""
        turn, tools = inflight.view.turn, self.chat_tools()
        final = turn.final
        if inflight.tool_rounds is None or tools is None or final is None or final.finish_reason == "cancelled":
            return
        if not self.chat.turns or self.chat.turns[-1] is not turn:
            return
        calls = final.parsed.calls if isinstance(final.parsed, ToolReply) else ()
        if calls:
            self.calling = Calling(inflight.tool_rounds + 1)
            self.run_calls(tools.tools, calls, self.calling)

    @work(thread=True, group="tools")
    def run_calls(self, tools: McpTools, calls: tuple[ToolCall, ...], calling: Calling) -> None:
        """In a worker: each call in turn, its result posted as it comes (the calls after a
        stop are not run, and say so)."""
        try:
            for call in calls:
                result = STOPPED if calling.stopped else tools.call(call.name, call.arguments)
                self.post_message(ToolCalled(call, result))
        finally:
            self.post_message(CallsDone())

    def on_tool_called(self, message: ToolCalled) -> None:
        calling = self.calling
        if calling is None:
            return
        turn = Turn("tool", message.result, kind=GIVEN)
        self.chat.turns.append(turn)
        calling.results.append(turn)
        try:
            self.history.add(self.chat, turn)
        except SpecemError as error:
            self.notify(f"A tool's result is not saved: {error}", severity="error", timeout=10)
        conversation = self.query_one("#conversation", VerticalScroll)
        conversation.mount(AnswerView(turn, self.colours))
        conversation.scroll_end(animate=False)

    def on_calls_done(self, _message: CallsDone) -> None:
        """The results are in: the ensemble answers again with them (or not, once stopped)."""
        calling, self.calling = self.calling, None
        if calling is None:
            return
        if calling.stopped:
            self.notify("Stopped after the call in progress; ask again to go on.")
            return
        answer = self.open_answer(self.chat.messages(), output=self.tools_format(calling.rounds))
        if answer is None:
            return
        turn = Turn("assistant", "")
        self.chat.turns.append(turn)
        view = AnswerView(turn, self.colours)
        conversation = self.query_one("#conversation", VerticalScroll)
        conversation.mount(view)
        conversation.scroll_end(animate=False)
        record: AnswerRecord | None
        try:
            record = self.history.start_answer(self.chat, turn)
        except SpecemError as error:
            self.notify(f"This answer is not being saved: {error}", severity="error", timeout=10)
            record = None
        self.begin(InFlight(answer, view, record=record, tool_rounds=calling.rounds))

    def drop_loop_answer(self, view: AnswerView, record: AnswerRecord | None) -> None:
        """An answer after tool results that failed before its first segment: gone (the results
        stay; a new question goes on from them)."""
        if self.chat.turns and self.chat.turns[-1] is view.turn:
            self.chat.turns.pop()
        view.remove()
        if record is not None:
            try:
                self.history.remove_messages([record.message_id])
            except SpecemError as error:
                self.notify(str(error), severity="error")
