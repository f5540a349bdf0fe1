"""The weights panel: each model's current weight as a bar and a number, its wins in this
answer and its drafting speed, updated every round; below the title, where the answer's
starting weights came from (the prior, carried over from earlier answers, or calibrated)."""

from __future__ import annotations

from textual.content import Content
from textual.style import Style
from textual.widgets import Static

from specem_local.events import RoundEvent
from specem_local.text import printable

BAR_WIDTH = 14


class WeightsPanel(Static):
    def __init__(self, weights: dict[str, float], origin: str, names: list[str], colours: dict[str, str]) -> None:
        super().__init__(classes="weights")
        self.border_title = "Weights"
        self.starting = weights
        self.origin = origin
        self.names = names
        self.colours = colours
        self.weights: dict[str, float] = {}
        self.wins: dict[str, int] = {}
        self.tokens_per_second: dict[str, float] = {}
        self._draft_tokens: dict[str, int] = {}
        self._draft_seconds: dict[str, float] = {}

    def on_mount(self) -> None:
        self.reset(self.starting, self.names, self.origin)

    def reset(self, weights: dict[str, float], names: list[str] | tuple[str, ...], origin: str) -> None:
        """A new answer: the weights the engine starts from (verifiers only), no wins yet."""
        self.origin = origin
        self.border_subtitle = f"from {origin}"
        self.weights = dict(weights)
        self.wins = dict.fromkeys(names, 0)
        self._draft_tokens = dict.fromkeys(names, 0)
        self._draft_seconds = dict.fromkeys(names, 0.0)
        self.tokens_per_second = {}
        self.update(self.render_panel())

    def add_round(self, event: RoundEvent) -> None:
        self.weights = dict(event.weights)
        if event.author:  # "": text the answer's format forced
            self.wins[event.author] = self.wins.get(event.author, 0) + 1
        for name, seconds in event.draft_seconds.items():
            self._draft_seconds[name] = self._draft_seconds.get(name, 0.0) + seconds
            self._draft_tokens[name] = self._draft_tokens.get(name, 0) + event.draft_tokens.get(name, 0)
            if self._draft_seconds[name] > 0:
                self.tokens_per_second[name] = self._draft_tokens[name] / self._draft_seconds[name]
        self.update(self.render_panel())

    def render_panel(self) -> Content:
        lines: list[Content] = []
        for name in self.wins:
            colour = Style.parse(self.colours.get(name, "white"))
            weight = self.weights.get(name)
            filled = round((weight or 0) * BAR_WIDTH)
            bar = "█" * filled + "░" * (BAR_WIDTH - filled)
            weight_text = f" {weight:.2f}" if weight is not None else " draft"
            speed = self.tokens_per_second.get(name)
            speed_text = f" · {speed:.0f} tok/s" if speed else ""
            lines.append(Content.assemble(("■ ", colour), (printable(name)[:24], colour)))
            lines.append(Content.assemble((bar, colour), weight_text))
            lines.append(Content(f"  wins {self.wins[name]}{speed_text}"))
        return Content("\n").join(lines)
