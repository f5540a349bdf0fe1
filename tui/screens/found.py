"""The models other tools downloaded (``specem models scan``), to add one to the ensemble: it
goes into models.toml (comments kept) and the ensemble reloads with it."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from specem_local.models.scan import FoundModel, scan
from specem_local.text import human_count, printable


def describe_found(model: FoundModel) -> str:
    """One line: name, where from, architecture, parameters, quantisation, template."""
    header = model.header
    if header is None:
        return printable(f"{model.suggested_name}  ({model.origin}: {model.problem})")
    size = human_count(model.parameters)
    template = "" if header.chat_template is not None else ", no chat template"
    return printable(
        f"{model.suggested_name}  ({model.origin}, {header.architecture} {size} {header.quantization}{template})"
    )


class FoundModelsScreen(ModalScreen[FoundModel | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Close")]

    def __init__(self) -> None:
        super().__init__()
        self.found: list[FoundModel] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="found"):
            yield Static("Looking in Ollama, LM Studio, the Hugging Face cache and ~/models…", id="found-status")
            yield OptionList(id="found-list")
            yield Footer()

    def on_mount(self) -> None:
        self.query_one("#found").border_title = "Models on this disk (Enter adds one)"
        self.look()

    @work(thread=True, exclusive=True)
    def look(self) -> None:
        """Headers only, but a big store has many: read them off the UI thread."""
        found = [model for model in scan() if model.header is not None]
        self.app.call_from_thread(self.show, found)

    def show(self, found: list[FoundModel]) -> None:
        self.found = found
        status = self.query_one("#found-status", Static)
        status.update(f"{len(found)} found." if found else "None found: specem models scan FOLDER looks elsewhere.")
        options = self.query_one("#found-list", OptionList)
        options.add_options([Option(describe_found(model), id=str(i)) for i, model in enumerate(found)])
        if found:
            options.highlighted = 0
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.found[int(event.option.id or 0)])
