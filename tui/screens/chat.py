"""The conversation: messages, the streaming answer, the weights panel and the input box.

Answers are generated in a thread worker (llama.cpp calls block); the worker hands every engine
event to the UI thread with ``call_from_thread``. The UI thread never calls the models.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specem_tui.screens.help import HelpScreen
from specem_tui.screens.history import HistoryScreen
from specem_tui.screens.inspector import InspectorScreen
from specem_tui.screens.settings import ChatSettings, SettingsScreen
from specem_tui.storage import Chat, Turn, export_markdown, load_chat, save_chat
from specem_tui.widgets.answer import AnswerView, UserMessage
from specem_tui.widgets.prompt import PromptInput
from specem_tui.widgets.weights import WeightsPanel
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from specem_local.engine import Ensemble
from specem_local.errors import SpecemError
from specem_local.events import FinalEvent, RoundEvent


class ChatScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_chat", "New"),
        Binding("ctrl+o", "history", "Chats"),
        Binding("ctrl+e", "export", "Export"),
        Binding("f2", "settings", "Settings"),
        Binding("f1", "help", "Help"),
        Binding("ctrl+q", "app.quit", "Quit"),
    ]

    def __init__(self, ensemble: Ensemble, colours: dict[str, str], chat: Chat | None = None) -> None:
        super().__init__()
        self.ensemble = ensemble
        self.colours = colours
        self.chat = chat or Chat()
        self.settings = ChatSettings(ensemble.settings, tuple(ensemble.model_names))
        self.answering: AnswerView | None = None
        self.title = f"specem-chat — {self.chat.title}"  # set before the Header mounts (no race)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield VerticalScroll(id="conversation")
            with Vertical(id="sidebar"):
                yield WeightsPanel(self.ensemble.model_names, self.colours)
                yield Static(self.status_text(), id="status")
        yield PromptInput()
        yield Footer()

    def on_mount(self) -> None:
        self.show_turns()
        self.query_one(PromptInput).focus()
        for failure in self.ensemble.load_failures:
            self.notify(f"{failure.model} did not load: {failure.error}", severity="warning", timeout=10)

    def status_text(self) -> str:
        settings = self.settings.ensemble
        mode = "plain generation (1 model)" if len(self.settings.models) == 1 else f"{len(self.settings.models)} models"
        return (
            f"{mode}\nL={settings.segment_tokens} T={settings.temperature:g}\n{settings.scoring}"
            f"{' · feedback' if settings.feedback else ''}{' · exit' if settings.model_exit else ''}"
            f"{' · fast' if settings.fast_finish else ''}"
        )

    # -- showing chats -------------------------------------------------------------------------------
    def show_chat(self, chat: Chat) -> None:
        """Switch to another chat (new, or resumed from the history)."""
        self.chat = chat
        self.title = f"specem-chat — {chat.title}"
        self.show_turns()

    def show_turns(self) -> None:
        conversation = self.query_one("#conversation", VerticalScroll)
        conversation.remove_children()
        for turn in self.chat.turns:
            conversation.mount(UserMessage(turn) if turn.role == "user" else AnswerView(turn, self.colours))
        conversation.scroll_end(animate=False)

    # -- asking --------------------------------------------------------------------------------------
    def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        if self.answering is not None:
            self.notify("Still answering; Esc stops it.", severity="warning")
            return
        prompt = self.query_one(PromptInput)
        prompt.clear()
        if not self.chat.turns:
            self.chat.title = message.text.splitlines()[0][:50]
            self.title = f"specem-chat — {self.chat.title}"
        self.chat.turns.append(Turn("user", message.text))
        self.save()
        answer = Turn("assistant", "")
        conversation = self.query_one("#conversation", VerticalScroll)
        conversation.mount(UserMessage(self.chat.turns[-1]))
        self.answering = AnswerView(answer, self.colours)
        conversation.mount(self.answering)
        conversation.scroll_end(animate=False)
        self.query_one(WeightsPanel).reset(list(self.settings.models))
        messages = self.chat.messages()
        self.chat.turns.append(answer)
        self.generate(messages, self.settings)

    @work(thread=True, exclusive=True, group="answer")
    def generate(self, messages: list[dict[str, str]], settings: ChatSettings) -> None:
        overrides = dataclasses.asdict(settings.ensemble)
        try:
            for event in self.ensemble.stream(messages, models=list(settings.models), **overrides):
                self.app.call_from_thread(self.on_engine_event, event)
        except SpecemError as error:
            self.app.call_from_thread(self.on_answer_failed, str(error))

    def on_engine_event(self, event: RoundEvent | FinalEvent) -> None:
        view = self.answering
        if view is None:
            return
        if isinstance(event, RoundEvent):
            data = event.to_dict()
            view.add_round(data)
            self.query_one(WeightsPanel).add_round(data)
            self.query_one("#conversation", VerticalScroll).scroll_end(animate=False)
            return
        view.turn.content = event.text
        view.turn.final = event.to_dict()
        view.finish()
        self.answering = None
        self.save()

    def on_answer_failed(self, error: str) -> None:
        """The answer could not start: say why and give the prompt back."""
        view = self.answering
        self.answering = None
        if view is not None:
            view.remove()
            self.chat.turns.pop()
            user_turn = self.chat.turns.pop()
            self.query_one("#conversation", VerticalScroll).children[-1].remove()
            self.query_one(PromptInput).text = user_turn.content
        self.notify(error, severity="error", timeout=10)
        self.save()

    def save(self) -> None:
        try:
            save_chat(self.chat)
        except OSError as error:
            self.notify(f"Could not save the chat: {error}", severity="error")

    # -- inspector -----------------------------------------------------------------------------------
    def on_answer_view_inspect_requested(self, message: AnswerView.InspectRequested) -> None:
        self.app.push_screen(InspectorScreen(message.view.turn.rounds, message.index, self.colours))

    # -- actions -------------------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.answering is not None:
            self.ensemble.cancel()

    def action_new_chat(self) -> None:
        if self.answering is not None:
            self.notify("Stop the answer first (Esc).", severity="warning")
            return
        self.show_chat(Chat())
        self.query_one(PromptInput).focus()

    def action_history(self) -> None:
        if self.answering is not None:
            self.notify("Stop the answer first (Esc).", severity="warning")
            return

        def resume(chat_id: str | None) -> None:
            if chat_id:
                try:
                    self.show_chat(load_chat(chat_id))
                except (OSError, ValueError, KeyError) as error:
                    self.notify(f"Could not open that chat: {error}", severity="error")

        self.app.push_screen(HistoryScreen(), resume)

    def action_export(self) -> None:
        try:
            path = export_markdown(self.chat, Path.cwd())
        except OSError as error:
            self.notify(f"Export failed: {error}", severity="error")
            return
        self.notify(f"Exported to {path}")

    def action_settings(self) -> None:
        def apply(settings: ChatSettings | None) -> None:
            if settings is not None:
                self.settings = settings
                self.query_one("#status", Static).update(self.status_text())
                self.notify("Settings apply to the next answer.")

        self.app.push_screen(SettingsScreen(self.settings, self.ensemble.model_names), apply)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())
