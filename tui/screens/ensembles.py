"""Pick a built-in ensemble; the chat goes on with it once its models have loaded."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList
from textual.widgets.option_list import Option


class EnsembleScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Close")]

    def __init__(self, ensembles: dict[str, str]) -> None:
        super().__init__()
        self.ensembles = ensembles

    def compose(self) -> ComposeResult:
        with Vertical(id="ensembles"):
            yield OptionList(*(Option(f"{name}  ({file})", id=name) for name, file in self.ensembles.items()))
            yield Footer()

    def on_mount(self) -> None:
        self.query_one("#ensembles").border_title = "Built-in ensembles (Enter loads one)"

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
