"""Past chats, newest first: type to search them (full text, once typing pauses, off the UI
thread), Enter resumes the highlighted one (Down moves into the list), Ctrl+D twice deletes one."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Footer, Input, OptionList
from textual.widgets.option_list import Option

from specem_local.errors import SpecemError
from specem_local.storage.history import History
from specem_local.text import printable, when

SEARCH_DELAY = 0.25  # seconds without a keystroke before the history is searched


def chat_id_of(option: Option) -> str:
    """The chat an option stands for (search results carry ``id<TAB>n``: one chat may match twice)."""
    return str(option.id).split("\t")[0]


class HistoryScreen(ModalScreen[str | None]):
    BINDINGS = [
        Binding("escape", "dismiss(None)", "Close"),
        Binding("ctrl+d", "delete", "Delete chat"),
        Binding("down", "focus_list", "List", show=False),
    ]

    def __init__(self, history: History, current: str | None = None) -> None:
        super().__init__()
        self.history = history
        self.current = current  # the chat on screen: deleting it is refused
        self.pending_delete: str | None = None
        self.typing: Timer | None = None  # the search waiting for a pause in the typing

    def compose(self) -> ComposeResult:
        with Vertical(id="history"):
            yield Input(placeholder="Search every chat (words, any order)…", id="search")
            yield OptionList(id="chats")
            yield Footer()

    def on_mount(self) -> None:
        self.query_one("#history").border_title = "Chats (Enter opens · Ctrl+D deletes)"
        self.look_up("")

    @work(thread=True, exclusive=True, group="search")
    def look_up(self, query: str) -> None:
        """List the chats, or the messages matching ``query``. Runs in a worker thread: a search
        of a long history never freezes the app."""
        try:
            if query.strip():
                rows = [
                    (f"{when(m.updated)}  {m.title} — {m.role}: {m.snippet}", f"{m.chat_id}\t{n}")
                    for n, m in enumerate(self.history.search(query, limit=50))
                ]
            else:
                rows = [(f"{when(c.updated)}  {c.title}  ({c.messages})", c.id) for c in self.history.chats(limit=500)]
        except SpecemError as error:
            self.app.call_from_thread(self.notify, str(error), severity="error", timeout=10)
            return
        self.app.call_from_thread(self.show_rows, query, rows)

    def show_rows(self, query: str, rows: list[tuple[str, str]]) -> None:
        if query != self.query_one(Input).value:
            return  # the user has typed on since: a newer search is coming
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options(Option(Text(printable(text)), id=key) for text, key in rows)
        if not rows and not query:
            self.notify("No saved chats yet.")

    def on_input_changed(self, event: Input.Changed) -> None:
        self.pending_delete = None
        if self.typing is not None:
            self.typing.stop()
        self.typing = self.set_timer(SEARCH_DELAY, lambda: self.look_up(event.value))  # once typing pauses

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        """Enter in the search box opens the highlighted chat (the first, unless moved)."""
        options = self.query_one(OptionList)
        if options.option_count:
            index = options.highlighted or 0
            self.dismiss(chat_id_of(options.get_option_at_index(index)))

    def action_focus_list(self) -> None:
        options = self.query_one(OptionList)
        if options.option_count:
            options.focus()
            options.highlighted = options.highlighted or 0

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(chat_id_of(event.option))

    def action_delete(self) -> None:
        """Ctrl+D twice on the same chat deletes it (the first press asks)."""
        options = self.query_one(OptionList)
        if options.highlighted is None:
            self.notify("Choose a chat first (Down, then arrows).")
            return
        chat_id = chat_id_of(options.get_option_at_index(options.highlighted))
        if chat_id == self.current:
            self.notify("That chat is open; start a new one (Ctrl+N) to delete it.", severity="warning")
            return
        if self.pending_delete != chat_id:
            self.pending_delete = chat_id
            self.notify("Press Ctrl+D again to delete this chat for good.", severity="warning")
            return
        try:
            self.history.delete(chat_id)
        except SpecemError as error:
            self.notify(str(error), severity="error")
            return
        self.pending_delete = None
        self.notify("Chat deleted.")
        self.look_up(self.query_one(Input).value)
