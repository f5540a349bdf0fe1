"""Past chats, newest first; Enter resumes one."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList
from textual.widgets.option_list import Option

from specem_tui.storage import list_chats


class HistoryScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="history"):
            chats = list_chats()
            options = [
                Option(f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(chat.updated))}  {chat.title}", id=chat.id)
                for chat in chats
            ]
            yield OptionList(*options, id="chats")
            yield Footer()

    def on_mount(self) -> None:
        self.query_one("#history").border_title = "Chats (Enter opens)"
        if not self.query_one(OptionList).option_count:
            self.notify("No saved chats yet.")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
