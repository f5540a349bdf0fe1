"""Start-up: a progress bar per model while the models load; failures are shown and the app
goes on with the models that did load."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Label, ProgressBar, Static

from specem_local.text import printable


class LoadingScreen(Screen[None]):
    BINDINGS = [Binding("ctrl+q,q", "app.quit", "Quit")]

    def __init__(self, names: list[str], source: str) -> None:
        super().__init__()
        self.names = names
        self.source = source

    def compose(self) -> ComposeResult:
        with Vertical(id="loading"):
            yield Static(Content(printable(f"Loading {len(self.names)} models from {self.source}")), id="loading-title")
            for index, name in enumerate(self.names):
                yield Label(name, id=f"label-{index}")
                yield ProgressBar(total=1.0, show_eta=False, id=f"progress-{index}")
            yield Static(id="loading-errors")
        yield Footer()

    def set_progress(self, name: str, fraction: float) -> None:
        self.query_one(f"#progress-{self.names.index(name)}", ProgressBar).update(progress=fraction)

    def set_failed(self, name: str, error: str) -> None:
        label = self.query_one(f"#label-{self.names.index(name)}", Label)
        label.update(Content(printable(f"{name}: failed: {error}")))
        label.add_class("failed")

    def set_fatal(self, error: str) -> None:
        widget = self.query_one("#loading-errors", Static)
        advice = "Fix models.toml (specem models list shows what is wrong), then restart. q quits."
        widget.update(Content(f"{printable(error)}\n\n{advice}"))
        widget.add_class("failed")
