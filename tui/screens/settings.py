"""Settings for the next answer: segment length, temperature, scoring, feedback, fast finish,
model exit, and which models take part."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Footer, Input, Label, Select, Switch

from specem_local.config import SCORING_MODES, EnsembleSettings
from specem_local.errors import SpecemError


@dataclass(frozen=True)
class ChatSettings:
    """What the settings screen edits: [ensemble] overrides and the models taking part."""

    ensemble: EnsembleSettings
    models: tuple[str, ...] = field(default_factory=tuple)


class SettingsScreen(ModalScreen[ChatSettings | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "save", "Apply")]

    def __init__(self, current: ChatSettings, all_models: list[str]) -> None:
        super().__init__()
        self.current = current
        self.all_models = all_models

    def compose(self) -> ComposeResult:
        settings = self.current.ensemble
        with VerticalScroll(id="settings"):
            yield Label("Segment length (tokens)")
            yield Input(str(settings.segment_tokens), id="segment_tokens", type="integer")
            yield Label("Temperature (0 = greedy)")
            yield Input(str(settings.temperature), id="temperature", type="number")
            yield Label("Scoring")
            yield Select(
                [(mode, mode) for mode in SCORING_MODES], value=settings.scoring, allow_blank=False, id="scoring"
            )
            for name, label in (
                ("feedback", "Online weights (feedback)"),
                ("loop_guard", "Loop guard"),
                ("fast_finish", "Fast finish"),
                ("model_exit", "Model exit"),
            ):
                with Horizontal(classes="switch-row"):
                    yield Switch(getattr(settings, name), id=name)
                    yield Label(label)
            yield Label("Models taking part")
            for index, name in enumerate(self.all_models):
                yield Checkbox(name, name in self.current.models, id=f"model-{index}")
            with Horizontal(classes="buttons"):
                yield Button("Apply", variant="primary", id="apply")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self.action_save()
        else:
            self.dismiss(None)

    def action_save(self) -> None:
        try:
            segment = int(self.query_one("#segment_tokens", Input).value)
            temperature = float(self.query_one("#temperature", Input).value)
            ensemble = replace(
                self.current.ensemble,
                segment_tokens=segment,
                temperature=temperature,
                greedy=temperature == 0,
                scoring=str(self.query_one("#scoring", Select).value),
                feedback=self.query_one("#feedback", Switch).value,
                loop_guard=self.query_one("#loop_guard", Switch).value,
                fast_finish=self.query_one("#fast_finish", Switch).value,
                model_exit=self.query_one("#model_exit", Switch).value,
            )
        except (ValueError, SpecemError) as error:
            self.notify(f"Invalid setting: {error}", severity="error")
            return
        models = tuple(
            name for index, name in enumerate(self.all_models) if self.query_one(f"#model-{index}", Checkbox).value
        )
        if not models:
            self.notify("Pick at least one model.", severity="error")
            return
        self.dismiss(ChatSettings(ensemble, models))
