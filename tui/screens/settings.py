"""Settings for the next answer: every per-answer ``[ensemble]`` setting, grouped as in
``settings.GROUPS`` and built from the same description as the models.toml checks and the
``specem`` flags, and which models take part; the MCP servers whose tools the chat offers (a
config file, kept for every ensemble); and a way to add a model found on this disk."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Footer, Input, Label, Select, Static, Switch, TextArea

from specem_local.errors import SpecemError
from specem_local.mcp import read_config
from specem_local.models.config import tomllib
from specem_local.models.scan import FoundModel
from specem_local.setting_fields import Setting, describe
from specem_local.settings import GROUPS, EnsembleSettings, with_overrides
from specem_local.storage.database import Preferences
from specem_local.storage.weights import ensemble_key
from specem_tui.screens.found import FoundModelsScreen


@dataclass(frozen=True)
class ChatSettings:
    """What the settings screen edits: the per-answer settings, the models taking part, and
    the MCP config whose servers' tools the chat offers ("": none)."""

    ensemble: EnsembleSettings
    models: tuple[str, ...] = field(default_factory=tuple)
    mcp: str = ""


MCP_KEY = "chat-mcp"  # the MCP config, kept for every ensemble


def _key(models: list[str]) -> str:
    return "chat-settings:" + ensemble_key(models)


def remembered_mcp() -> str:
    try:
        saved = Preferences().get(MCP_KEY)
    except SpecemError:
        return ""
    return saved if isinstance(saved, str) else ""


def remembered_settings(defaults: EnsembleSettings, models: list[str]) -> tuple[ChatSettings, str | None]:
    """The settings this ensemble's chat was left with last time (what differed from
    models.toml), and a problem to mention if they no longer apply."""
    plain = ChatSettings(defaults, tuple(models), remembered_mcp())
    try:
        saved = Preferences().get(_key(models))
        if not isinstance(saved, dict):
            return plain, None
        ensemble = with_overrides(defaults, **saved.get("changed", {}))
    except (SpecemError, TypeError, AttributeError) as error:
        return plain, f"The settings saved last time were not applied: {error}"
    taking_part = tuple(name for name in models if name in saved.get("models", models))
    return ChatSettings(ensemble, taking_part or tuple(models), plain.mcp), None


def remember_settings(defaults: EnsembleSettings, models: list[str], chosen: ChatSettings) -> None:
    """Keep what differs from models.toml, and the models taking part, for the next start."""
    changed = {
        item.name: getattr(chosen.ensemble, item.name)
        for item in describe(EnsembleSettings)
        if getattr(chosen.ensemble, item.name) != getattr(defaults, item.name)
    }
    Preferences().set(_key(models), {"changed": changed, "models": list(chosen.models)})
    Preferences().set(MCP_KEY, chosen.mcp)


def setting_widget(item: Setting, value: Any) -> Widget:
    """The form control for one setting, by its kind."""
    widget_id = f"setting-{item.name}"
    if item.kind == "bool":
        return Switch(value, id=widget_id)
    if item.limits.choices:
        return Select(
            [(choice, choice) for choice in item.limits.choices], value=value, allow_blank=False, id=widget_id
        )
    if item.kind == "strings":  # a TOML array, so any character can be written (\n, quotes)
        text = "[" + ", ".join(json.dumps(text, ensure_ascii=False) for text in value) + "]"
        return Input(text, id=widget_id, placeholder='["stop here", "\\n\\n"]')
    if item.kind == "str":  # free text over several lines (the system prompt)
        return TextArea(value, id=widget_id, classes="setting-text", show_line_numbers=False)
    return Input(str(value), id=widget_id)  # checked on Apply: an integer field must not drop a typed "."


def widget_value(item: Setting, widget: Widget) -> Any:
    """A control's value as the setting's type; a ``SpecemError`` says what is wrong."""
    if isinstance(widget, (Switch, Select)):
        return item.convert(widget.value, "")
    if isinstance(widget, TextArea):
        return item.convert(widget.text, "")
    assert isinstance(widget, Input)
    text = widget.value.strip()
    if item.kind == "strings":
        try:
            value: Any = tomllib.loads(f"value = {text or '[]'}")["value"]
        except tomllib.TOMLDecodeError:
            raise SpecemError(f'{item.name} must be an array of strings, such as ["###", "\\n\\n"]') from None
    else:
        return item.parse(text, "")
    return item.convert(value, "")


class SettingsScreen(ModalScreen[ChatSettings | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "save", "Apply")]

    def __init__(self, current: ChatSettings, all_models: list[str]) -> None:
        super().__init__()
        self.current = current
        self.all_models = all_models

    def compose(self) -> ComposeResult:
        settings = self.current.ensemble
        with VerticalScroll(id="settings"):
            yield Label("Models taking part", classes="settings-group")
            for index, name in enumerate(self.all_models):
                yield Checkbox(name, name in self.current.models, id=f"model-{index}")
            for group, title in GROUPS.items():
                items = [item for item in describe(EnsembleSettings) if item.group == group]
                if not items:
                    continue
                yield Label(title.capitalize(), classes="settings-group")
                for item in items:
                    widget = setting_widget(item, getattr(settings, item.name))
                    if item.kind == "bool":
                        with Horizontal(classes="switch-row"):
                            yield widget
                            yield Label(f"{item.name}: {item.help}")
                    else:
                        yield Static(f"{item.name}: {item.help}", classes="setting-label")
                        yield widget
            yield Label("Tools", classes="settings-group")
            yield Static(
                'mcp: MCP servers whose tools the models may call in the chat (a JSON file, {"mcpServers": ...}; '
                "stdio servers); empty: none",
                classes="setting-label",
            )
            yield Input(self.current.mcp, id="mcp-config", placeholder="~/.config/specem/mcp.json")
            yield Button("Add a model from this disk…", id="add-model")
            with Horizontal(classes="buttons"):
                yield Button("Apply", variant="primary", id="apply")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        self.query(Checkbox).first().focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self.action_save()
        elif event.button.id == "add-model":
            self.app.push_screen(FoundModelsScreen(), self.add_found)
        else:
            self.dismiss(None)

    def add_found(self, found: FoundModel | None) -> None:
        """Leave the form and let the app add the model (the ensemble reloads with it)."""
        if found is not None:
            self.dismiss(None)
            self.app.add_model(found)

    def action_save(self) -> None:
        try:
            values = {
                item.name: widget_value(item, self.query_one(f"#setting-{item.name}"))
                for item in describe(EnsembleSettings)
            }
            ensemble = replace(self.current.ensemble, **values)
        except SpecemError as error:
            self.notify(f"Invalid setting: {error}", severity="error")
            return
        models = tuple(
            name for index, name in enumerate(self.all_models) if self.query_one(f"#model-{index}", Checkbox).value
        )
        if not models:
            self.notify("Pick at least one model.", severity="error")
            return
        mcp = self.query_one("#mcp-config", Input).value.strip()
        try:
            if mcp:
                read_config(mcp)  # a bad file is said here, the form kept
        except SpecemError as error:
            self.notify(f"Invalid setting: {error}", severity="error")
            return
        self.dismiss(ChatSettings(ensemble, models, mcp))
