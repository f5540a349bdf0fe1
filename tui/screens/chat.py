"""The conversation: messages, the streaming answer, the weights panel and the input box.

Answers are generated in a thread worker (llama.cpp calls block). The worker never waits on
the UI: it posts each engine event as a message (``AnswerEvent``), and ``AnswerFailed`` if the
answer fails; the UI thread handles them in order and never calls the models. Each answer has
its own cancel token, made when the message is sent, so Esc works from the first moment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.await_complete import AwaitComplete
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from specem_local.engine import AnswerStream, Ask, Ensemble, OutputFormat
from specem_local.errors import SpecemError
from specem_local.events import Candidate, Event, FinalEvent, RoundEvent, StartEvent, member_news
from specem_local.models.config import builtin_ensembles
from specem_local.storage.chat_files import export_chat
from specem_local.storage.chats import Chat, Turn, title_for
from specem_local.storage.history import AnswerRecord, History
from specem_local.text import printable
from specem_tui.screens.chat_tools import Calling, ToolLoop
from specem_tui.screens.chat_versions import AnswerVersions
from specem_tui.screens.ensembles import EnsembleScreen
from specem_tui.screens.help import HelpScreen
from specem_tui.screens.history import HistoryScreen
from specem_tui.screens.inflight import InFlight
from specem_tui.screens.inspector import InspectorScreen
from specem_tui.screens.settings import ChatSettings, SettingsScreen, remember_settings, remembered_settings
from specem_tui.widgets.answer import AnswerView, UserMessage
from specem_tui.widgets.prompt import PromptInput
from specem_tui.widgets.weights import WeightsPanel

SETTLE_FRAMES = 30  # a finished answer's end followed while its height settles: at most this many frames
FRAME_SECONDS = 1 / 30

CONFIRM_SECONDS = 5.0  # a second Ctrl+R within this confirms the reset


class AnswerEvent(Message):
    """An engine event for the answer being written."""

    def __init__(self, answer: AnswerStream, event: Event) -> None:
        super().__init__()
        self.answer = answer
        self.event = event


class AnswerFailed(Message):
    """The answer stopped with an error (before or after it began to stream)."""

    def __init__(self, answer: AnswerStream | None, error: str) -> None:
        super().__init__()
        self.answer = answer
        self.error = error


class ChatScreen(ToolLoop, AnswerVersions, Screen[None]):
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_chat", "New"),
        Binding("ctrl+o", "history", "Chats"),
        Binding("ctrl+e", "export", "Export", priority=True),  # the input box would take it (end of line)
        Binding("f2", "settings", "Settings"),
        Binding("ctrl+r", "reset_weights", "Reset weights"),
        Binding("ctrl+z", "undo_choice", "Undo choice", show=False, priority=True),  # over the input box's undo
        Binding("ctrl+l", "switch_ensemble", "Ensemble"),
        Binding("f1", "help", "Help"),
        Binding("ctrl+q", "app.quit", "Quit"),
    ]

    def __init__(
        self, ensemble: Ensemble, colours: dict[str, str], chat: Chat | None = None, history: History | None = None
    ) -> None:
        super().__init__()
        self.ensemble = ensemble
        self.colours = colours
        self.chat = chat or Chat()
        self.history = history or History()
        self.settings, self.settings_problem = remembered_settings(ensemble.settings, ensemble.model_names)
        self.inflight: InFlight | None = None  # the answer being written
        self.calling: Calling | None = None  # the MCP tools an answer called, being run
        self.editing: Turn | None = None  # the last question, being edited in the input box
        self.warnings_said = 0  # the ensemble's warnings shown so far
        self.reset_asked = -CONFIRM_SECONDS  # when Ctrl+R last asked to confirm (time.monotonic())
        self.show_title()  # set before the Header mounts (no race)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield VerticalScroll(id="conversation", can_focus=False)  # Tab goes to the answers, not here
            with Vertical(id="sidebar"):
                yield WeightsPanel(
                    self.ensemble.starting_weights(),
                    self.ensemble.weights_origin(),
                    self.ensemble.model_names,
                    self.colours,
                )
                yield Static(self.status_text(), id="status")
        yield PromptInput()
        yield Footer()

    def on_mount(self) -> None:
        self.show_turns()
        self.query_one(PromptInput).focus()
        for failure in self.ensemble.load_failures:
            self.notify(f"{failure.model} did not load: {failure.error}", severity="warning", timeout=10)
        self.say_new_warnings()  # the models' load warnings, said once
        advice = self.ensemble.mix_advice()
        if advice:
            self.notify(advice, timeout=10)
        if self.settings_problem:
            self.notify(self.settings_problem, severity="warning", timeout=10)
        self.app.use_mcp(self.settings.mcp)  # the MCP servers the settings name (started once per app)

    def status_text(self) -> str:
        settings = self.settings.ensemble
        mode = "plain generation (1 model)" if len(self.settings.models) == 1 else f"{len(self.settings.models)} models"
        taking_part = [m for m in self.ensemble.member_facts() if m.name in self.settings.models]
        places = {m.placement.split(" ")[0] for m in taking_part}
        remote = [f"{m.name}: {m.placement}" for m in taking_part if m.placement.startswith("RPC")]
        return printable(
            f"{mode} on {' + '.join(sorted(places))}\n"
            + "".join(f"{line}\n" for line in remote)
            + f"L={settings.segment_tokens} T={settings.temperature:g}\n{settings.scoring}"
            f"{' · feedback' if settings.feedback else ''}{' · exit' if settings.model_exit else ''}"
            f"{' · fast' if settings.fast_finish else ''}"
            + (f"\nMCP tools: {len(tools.tools.tools)}" if (tools := self.chat_tools()) is not None else "")
        )

    def show_status(self) -> None:
        self.query_one("#status", Static).update(self.status_text())

    # -- showing chats -------------------------------------------------------------------------------
    def show_title(self) -> None:
        self.title = printable(f"specem-chat — {self.chat.title}")

    def show_chat(self, chat: Chat) -> None:
        """Switch to another chat (new, or resumed from the history)."""
        self.chat = chat
        self.show_title()
        self.show_turns()

    def show_turns(self) -> None:
        conversation = self.query_one("#conversation", VerticalScroll)
        conversation.remove_children()
        for turn in self.chat.turns:
            conversation.mount(UserMessage(turn) if turn.role == "user" else AnswerView(turn, self.colours))
        conversation.scroll_end(animate=False)

    # -- asking --------------------------------------------------------------------------------------
    def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        if self.inflight is not None or self.calling is not None:
            self.notify("Still answering; Esc stops it.", severity="warning")
            return
        editing = self.editing is not None and len(self.chat.turns) >= 2 and self.chat.turns[-2] is self.editing
        kept = len(self.chat.turns) - 2 if editing else None  # an edit asks again in place of the last question
        output = self.tools_format()  # the MCP tools, when the settings name servers
        answer = self.open_answer([*self.chat.messages(kept), {"role": "user", "content": message.text}], output=output)
        if answer is None:  # a bad setting or model choice fails here, before anything is shown
            return
        self.query_one(PromptInput).clear()
        self.editing = None
        retitle = not self.chat.turns or kept == 0  # the first question, asked or edited
        user_turn, answer_turn = Turn("user", message.text), Turn("assistant", "")
        conversation = self.query_one("#conversation", VerticalScroll)
        replaced: list[Turn] = []
        if editing:
            replaced = self.chat.turns[-2:]
            del self.chat.turns[-2:]
            user_turn.alternatives = list(replaced)
            for view in list(conversation.children)[-2:]:  # the last question and its answer
                view.remove()
        self.chat.turns += [user_turn, answer_turn]
        if retitle:
            self.chat.title = title_for(message.text)
            self.show_title()
        record = self.record_question(user_turn, answer_turn)
        asked, view = UserMessage(user_turn), AnswerView(answer_turn, self.colours)
        conversation.mount(asked, view)
        conversation.scroll_end(animate=False)
        after = (lambda _turn: self.keep_edit(user_turn, replaced[0])) if replaced else None
        taken_back = (lambda: self.put_back(replaced)) if replaced else None
        self.begin(InFlight(answer, view, asked, record, after, taken_back, tool_rounds=0 if output else None))

    def open_answer(
        self,
        messages: list[dict[str, str]],
        models: list[str] | None = None,
        output: OutputFormat | None = None,
        **overrides: object,
    ) -> AnswerStream | None:
        """An answer to ``messages`` with the chat's settings (and ``overrides``), in ``output``'s
        format (the MCP tools offered); a bad setting is said here and nothing starts."""
        settings = {**dataclasses.asdict(self.settings.ensemble), **overrides}
        ask = Ask(list(messages), settings, output=output, models=tuple(models or self.settings.models))
        try:
            return self.ensemble.stream(ask)
        except SpecemError as error:
            self.notify(str(error), severity="error", timeout=10)
            return None

    def begin(self, inflight: InFlight) -> None:
        """Stream the answer into the version its view shows."""
        self.inflight = inflight
        self.generate(inflight.stream)

    @work(thread=True, exclusive=True, group="answer")
    def generate(self, answer: AnswerStream) -> None:
        """Runs in a worker thread: stream the answer, posting each event to the UI."""
        try:
            for event in answer:
                self.post_message(AnswerEvent(answer, event))
        except SpecemError as error:
            self.post_message(AnswerFailed(answer, str(error)))
        except Exception as error:  # a bug must not take the app, or the answer so far, with it
            self.post_message(AnswerFailed(answer, f"unexpected {type(error).__name__}: {error}"))

    def on_answer_event(self, message: AnswerEvent) -> None:
        inflight, event = self.inflight, message.event
        if inflight is None or message.answer is not inflight.stream:
            return
        view = inflight.view
        for line in member_news(event, inflight.members_said):  # a member on another machine that failed
            self.notify(printable(line), severity="warning", timeout=15)
        if isinstance(event, StartEvent):
            self.query_one(WeightsPanel).reset(event.weights, event.models, event.weights_origin)
            return
        if inflight.record is not None:  # it adds the event to the turn, and saves it
            inflight.record.event(event)
            self.say_if_not_saved()
        else:
            view.turn.add(event)
        if isinstance(event, RoundEvent):
            inflight.streamed += 1
            view.refresh_segments()
            self.query_one(WeightsPanel).add_round(event)
            self.query_one("#conversation", VerticalScroll).scroll_end(animate=False)
        elif isinstance(event, FinalEvent):
            self.end_answer()

    def on_answer_failed(self, message: AnswerFailed) -> None:
        """Before the first segment: take the question back into the input box (or drop the
        version that was to be written). After it: keep the answer so far, marked as failed.
        Either way, say why."""
        inflight = self.inflight
        if inflight is None or message.answer is not inflight.stream:
            return
        view = inflight.view
        self.notify(message.error, severity="error", timeout=10)
        if inflight.streamed:
            if inflight.record is not None:
                inflight.record.fail(message.error)  # sets the turn's error and writes it
                self.say_if_not_saved()
            else:
                view.turn.error = message.error
            self.end_answer()
            return
        if inflight.asked is None and inflight.tool_rounds:  # an answer after tool results: gone
            self.drop_loop_answer(view, inflight.record)
        elif inflight.asked is None:  # a version of an answer: the answer shown before comes back
            self.drop_version(view, inflight.record)
        else:
            user_turn = self.chat.turns[-2]
            del self.chat.turns[-2:]
            view.remove()
            inflight.asked.remove()
            self.query_one(PromptInput).text = user_turn.content
            if inflight.record is not None:
                self.forget_question([*inflight.record.asked_ids, inflight.record.message_id])
        self.inflight = None
        if inflight.taken_back is not None:
            inflight.taken_back()

    def end_answer(self) -> None:
        inflight = self.inflight
        assert inflight is not None
        drawn = inflight.view.finish()
        if self.chat.turns and inflight.view.shown is self.chat.turns[-1]:
            self.keep_end_in_sight(drawn)
        self.inflight = None
        self.say_new_warnings()  # what the answer could not keep (learned weights in a damaged file)
        if inflight.after is not None:
            inflight.after(inflight.view.turn)
        self.go_on_with_calls(inflight)  # an answer that calls MCP tools: run them, then answer again

    @work(group="scroll")
    async def keep_end_in_sight(self, drawn: AwaitComplete) -> None:
        """A finished answer's Markdown view is taller than its segments: once it is drawn,
        scroll to its end, as the segments were while they streamed. Its height can settle over
        more than one refresh (its blocks are laid out after they mount): follow it until it
        stays put for a frame, for at most ``SETTLE_FRAMES``."""
        await drawn
        conversation = self.query_one("#conversation", VerticalScroll)
        end = -1.0
        for _ in range(SETTLE_FRAMES):
            if conversation.max_scroll_y == end:
                break
            end = conversation.max_scroll_y
            conversation.scroll_end(animate=False, immediate=True)
            await asyncio.sleep(FRAME_SECONDS)

    def say_new_warnings(self) -> None:
        """The ensemble's warnings not shown yet: each is said once."""
        for warning in self.ensemble.warnings[self.warnings_said :]:
            self.notify(warning, severity="warning", timeout=10)
        self.warnings_said = len(self.ensemble.warnings)

    def on_unmount(self) -> None:
        """Closing the app mid-answer: keep what was written, saying why it ends there."""
        if self.inflight is not None and self.inflight.record is not None:
            self.inflight.record.fail("the app was closed while it was being written")

    # -- the history ---------------------------------------------------------------------------------
    def record_question(self, question: Turn, answer: Turn) -> AnswerRecord | None:
        """Save the question, and the answer as it streams; a failure is said, not fatal."""
        try:
            return self.history.start_answer(self.chat, answer, asked=[question])
        except SpecemError as error:
            self.notify(f"This chat is not being saved: {error}", severity="error", timeout=10)
            return None

    def say_if_not_saved(self) -> None:
        record = self.inflight.record if self.inflight is not None else None
        if record is not None and record.error:
            self.notify(f"This answer could not be saved: {record.error}", severity="error", timeout=10)
            self.inflight.record = None  # type: ignore[union-attr]  # said once; the answer goes on

    def forget_question(self, message_ids: list[int]) -> None:
        try:
            self.history.remove_messages(message_ids)
        except SpecemError as error:
            self.notify(str(error), severity="error")

    # -- inspector -----------------------------------------------------------------------------------
    def on_answer_view_inspect_requested(self, message: AnswerView.InspectRequested) -> None:
        """The candidate inspector; on the last answer, g there goes on from the candidate picked."""
        view = message.view

        def picked(choice: tuple[int, Candidate] | None) -> None:
            if choice is not None and not self.busy():
                self.go_on_from(view, *choice)

        can_go_on = self.is_last(view) and self.inflight is None
        self.app.push_screen(InspectorScreen(view.turn.rounds, message.index, self.colours, can_go_on), picked)

    # -- actions -------------------------------------------------------------------------------------
    def busy(self) -> bool:
        """Whether an answer is being written or its tools run (and if so, say how to stop it)."""
        busy = self.inflight is not None or self.calling is not None
        if busy:
            self.notify("Stop the answer first (Esc).", severity="warning")
        return busy

    def action_stop(self) -> None:
        if self.inflight is not None:
            self.inflight.stream.cancel()
        if self.calling is not None:  # the call in progress ends; no other runs, no answer follows
            self.calling.stopped = True

    def action_new_chat(self) -> None:
        if self.busy():
            return
        self.show_chat(Chat())
        self.query_one(PromptInput).focus()

    def action_history(self) -> None:
        if self.busy():
            return

        def resume(chat_id: str | None) -> None:
            if chat_id:
                try:
                    self.show_chat(self.history.load(chat_id))
                except SpecemError as error:
                    self.notify(f"Could not open that chat: {error}", severity="error")

        self.app.push_screen(HistoryScreen(self.history, self.chat.id), resume)

    def action_export(self) -> None:
        if not self.chat.turns:  # a new chat is not in the history until its first question
            self.notify("Nothing to export yet: ask something first.")
            return
        try:
            path = export_chat(self.chat, Path.cwd() / f"specem-chat-{self.chat.id}.md")
        except (SpecemError, OSError) as error:  # a folder, a read-only or full disk: said, not fatal
            self.notify(f"Export failed: {error}", severity="error")
            return
        self.notify(f"Exported to {path}")

    def action_settings(self) -> None:
        def apply(settings: ChatSettings | None) -> None:
            if settings is not None:
                self.settings = settings
                self.app.use_mcp(settings.mcp)
                self.show_status()
                try:
                    remember_settings(self.ensemble.settings, self.ensemble.model_names, settings)
                    self.notify("Settings apply to the next answer, and are kept for next time.")
                except SpecemError as error:
                    self.notify(f"Settings apply to the next answer (not kept: {error}).", severity="warning")

        self.app.push_screen(SettingsScreen(self.settings, self.ensemble.model_names), apply)

    def action_reset_weights(self) -> None:
        """Forget the weights kept for the models taking part (a calibration, your choices,
        carried learning): the next answer starts from the prior (or a built-in calibration).
        The first press asks (Ctrl+R is reverse search in every shell: a habit); Ctrl+Z brings
        them back."""
        if self.busy():
            return
        models = list(self.settings.models)
        if time.monotonic() > self.reset_asked + CONFIRM_SECONDS:
            self.reset_asked = time.monotonic()
            origin = self.ensemble.weights_origin(models)
            self.notify(
                f"Press Ctrl+R again to forget the weights kept for these models ({origin}); Ctrl+Z brings them back.",
                severity="warning",
                timeout=CONFIRM_SECONDS,
            )
            return
        self.reset_asked = -CONFIRM_SECONDS
        try:
            forgot = self.ensemble.reset_weights(models)
            weights, origin = self.ensemble.starting_weights(models), self.ensemble.weights_origin(models)
        except SpecemError as error:
            self.notify(str(error), severity="error")
            return
        self.query_one(WeightsPanel).reset(weights, models, origin)
        self.notify(
            f"Weights reset: the next answer starts from {origin}; Ctrl+Z brings them back."
            if forgot
            else "No learned weights to reset."
        )

    def action_switch_ensemble(self) -> None:
        if self.busy():
            return

        def switch(name: str | None) -> None:
            if name:
                self.app.switch_ensemble(name)

        self.app.push_screen(EnsembleScreen(builtin_ensembles()), switch)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self.leaderboard()))
