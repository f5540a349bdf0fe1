"""Messages in the conversation: the user's, and the ensemble's answer with its authors."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.style import Style
from textual.widgets import Markdown, Static

from specem_local.chats import Turn
from specem_local.events import finish_note


class UserMessage(Static):
    """What the user asked."""

    def __init__(self, turn: Turn) -> None:
        super().__init__(Content(turn.content), classes="user-message")
        self.border_title = "You"


class SegmentText(Static):
    """The answer as coloured segments; a click on one selects it. Each segment carries its
    index in the style's meta (not an ``@click`` action, whose link style would hide the
    author's colour)."""

    class Clicked(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def on_click(self, event: events.Click) -> None:
        index = event.style.meta.get("segment")
        if index is not None:
            self.post_message(self.Clicked(int(index)))


class AnswerView(Vertical, can_focus=True):
    """One ensemble answer. While it streams, each segment is tinted by the model that wrote
    it; when complete it is rendered as Markdown (``m`` toggles back). Left/Right select a
    segment, Enter opens the candidate inspector for that round."""

    BINDINGS = [
        ("left", "move(-1)", "Prev segment"),
        ("right", "move(1)", "Next segment"),
        ("enter", "inspect", "Inspect"),
        ("m", "toggle_markdown", "Markdown"),
    ]

    selected: reactive[int] = reactive(-1)
    show_markdown: reactive[bool] = reactive(False)

    class InspectRequested(Message):
        def __init__(self, view: AnswerView, index: int) -> None:
            super().__init__()
            self.view = view
            self.index = index

    def __init__(self, turn: Turn, colours: dict[str, str]) -> None:
        super().__init__(classes="answer")
        self.turn = turn
        self.colours = colours
        self.border_title = "Ensemble"

    def compose(self) -> ComposeResult:
        yield SegmentText(self.segments_content(), classes="segments")
        yield Markdown(classes="markdown")

    def on_mount(self) -> None:
        if self.turn.done:
            self.finish()

    def segments_content(self) -> Content:
        parts: list[tuple[str, Style] | str] = []
        for index, event in enumerate(self.turn.rounds):
            style = Style.parse(self.colours.get(event.author, "white"))
            style += Style.from_meta({"segment": index})
            if index == self.selected:
                style += Style(reverse=True)
            parts.append((event.text, style))
        if not self.turn.rounds and not self.turn.done:
            parts.append(("drafting the first segment…", Style(italic=True, dim=True)))
        if self.turn.stopped:
            parts.append((" [stopped]", Style(italic=True, dim=True)))
        if self.turn.error:
            parts.append((f" [failed: {self.turn.error}]", Style(italic=True, dim=True)))
        return Content.assemble(*parts)

    def refresh_segments(self) -> None:
        self.query_one(SegmentText).update(self.segments_content())

    def finish(self) -> None:
        """The answer is complete, stopped or failed: show the summary and the Markdown view."""
        final = self.turn.final
        if final is not None:
            wins = "  ".join(f"{name} {count}" for name, count in final.wins.items() if count)
            parts = [f"{final.tokens} tok", f"{final.seconds:.1f}s", final.finish_reason, wins]
            self.border_subtitle = " · ".join(part for part in parts if part)
        why = self.turn.ending or (finish_note(final) if final is not None else None)
        self.query_one(Markdown).update(self.turn.content + (f"\n\n*({why})*" if why else ""))
        self.refresh_segments()
        self.show_markdown = True

    def watch_show_markdown(self, show: bool) -> None:
        self.query_one(SegmentText).display = not show
        self.query_one(Markdown).display = show

    def watch_selected(self) -> None:
        if self.is_mounted:
            self.refresh_segments()

    def action_toggle_markdown(self) -> None:
        if self.turn.done:
            self.show_markdown = not self.show_markdown

    def action_move(self, step: int) -> None:
        if not self.turn.rounds:
            return
        self.show_markdown = False
        start = self.selected if self.selected >= 0 else (-1 if step > 0 else len(self.turn.rounds))
        self.selected = max(0, min(len(self.turn.rounds) - 1, start + step))

    def action_inspect(self) -> None:
        if self.turn.rounds:
            self.post_message(self.InspectRequested(self, max(self.selected, 0)))

    def on_segment_text_clicked(self, message: SegmentText.Clicked) -> None:
        self.focus()
        self.selected = message.index
        self.post_message(self.InspectRequested(self, message.index))
