"""Messages in the conversation: the user's, and the ensemble's answer with its authors."""

from __future__ import annotations

import json

from textual import events
from textual.app import ComposeResult
from textual.await_complete import AwaitComplete
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.style import Style
from textual.widgets import Collapsible, Markdown, Static

from specem_local.engine import reply_from_text
from specem_local.events import finish_note, member_news
from specem_local.storage.chat_files import speaker
from specem_local.storage.chats import GIVEN, Turn, code_blocks
from specem_local.text import printable


class UserMessage(Static):
    """What the user asked (an edited question says how many earlier versions it has)."""

    def __init__(self, turn: Turn) -> None:
        super().__init__(Content(printable(turn.content)), classes="user-message")
        earlier = sum(t.role == "user" for t in turn.alternatives)
        self.border_title = (
            f"You (edited; {earlier} earlier version{'s' if earlier != 1 else ''} kept)" if earlier else "You"
        )


def version_label(turn: Turn) -> str:
    """Who wrote a version of an answer, for its border."""
    if turn.kind == GIVEN or turn.role != "assistant":
        return speaker(turn)  # a message a client sent with its request
    if turn.kind.startswith("alone: "):
        return f"{printable(turn.kind.removeprefix('alone: '))} alone"
    return {"regenerated": "Ensemble (regenerated)", "continued": "Ensemble (from your pick)"}.get(
        turn.kind, "Ensemble"
    )


def readable(text: str) -> str:
    """An answer as Markdown: a tool reply as its calls (or its message), not as raw JSON (the
    chat app runs them when they are its MCP servers' tools; their results follow)."""
    reply = reply_from_text(text)
    if reply is None:
        return text
    if not reply.calls:
        return reply.content or ""
    calls = "\n".join(f"- `{call.name}({json.dumps(call.arguments, ensure_ascii=False)})`" for call in reply.calls)
    what = "a tool" if len(reply.calls) == 1 else f"{len(reply.calls)} tools"
    return f"**Calls {what}**:\n\n{calls}"


def sureness_style(sure: float | None) -> Style:
    """A segment's background by how sure it is: red below 0.5, yellow below 0.8, none above
    (nor for text the format forced, which no one was unsure of)."""
    if sure is None or sure >= 0.8:
        return Style()
    return Style.parse("on darkred" if sure < 0.5 else "on #5f5f00")


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
    """One ensemble answer and its other versions. While it streams, each segment is tinted by
    the model that wrote it; when complete it is rendered as Markdown (``m`` toggles back).
    Left/Right select a segment, Enter opens the candidate inspector for that round; [ and ]
    show the other versions (regenerated, continued from a pick, each model alone). What
    changes the chat (regenerate, edit, compare, thumbs, best) is asked of the chat screen."""

    BINDINGS = [
        ("left", "move(-1)", "Prev segment"),
        ("right", "move(1)", "Next segment"),
        ("enter", "inspect", "Inspect"),
        ("m", "toggle_markdown", "Markdown"),
        Binding("u", "toggle_sureness", "Sureness", show=False),
        Binding("left_square_bracket", "request('version', -1)", "Prev version", show=False),
        Binding("right_square_bracket", "request('version', 1)", "Next version", show=False),
        Binding("r", "request('regenerate')", "Regenerate"),
        Binding("e", "request('edit')", "Edit question", show=False),
        Binding("k", "request('compare')", "Compare", show=False),
        Binding("b", "request('best')", "Best", show=False),
        Binding("plus", "request('thumbs-up')", "Thumbs up", show=False),
        Binding("minus", "request('thumbs-down')", "Thumbs down", show=False),
        Binding("c", "copy", "Copy"),
        Binding("y", "copy_code", "Copy code", show=False),
    ]

    selected: reactive[int] = reactive(-1)
    show_markdown: reactive[bool] = reactive(False)
    tint_sureness: reactive[bool] = reactive(False)  # u: each segment's background by how sure it is

    class InspectRequested(Message):
        def __init__(self, view: AnswerView, index: int) -> None:
            super().__init__()
            self.view = view
            self.index = index

    class Requested(Message):
        """The user asked for something that changes the chat: ``action`` is "version" (with
        ``step``), "regenerate", "edit", "compare", "best", "thumbs-up" or "thumbs-down"."""

        def __init__(self, view: AnswerView, action: str, step: int = 0) -> None:
            super().__init__()
            self.view = view
            self.action = action
            self.step = step

    def __init__(self, turn: Turn, colours: dict[str, str]) -> None:
        super().__init__(classes="answer")
        self.shown = turn  # the version in the conversation (its alternatives are the others)
        self.turn = turn  # the version on screen
        self.colours = colours
        # Kept, not queried: a Collapsible mounts its contents a frame after itself, and an
        # answer can end (finish() writes here) before that frame.
        self.reasoning_text = Static("", classes="reasoning-text")
        self.border_title = self.title_text()

    def title_text(self) -> str:
        versions = self.shown.versions()
        where = f" · {versions.index(self.turn) + 1}/{len(versions)}" if len(versions) > 1 else ""
        return version_label(self.turn) + where

    def display_version(self, turn: Turn, shown: Turn | None = None) -> None:
        """Show ``turn`` (one of the versions of ``shown``, by default the current one's)."""
        self.shown = shown or self.shown
        self.turn = turn
        self.selected = -1
        self.border_title = self.title_text()
        self.border_subtitle = ""
        if turn.done:
            self.finish()
        else:
            self.show_markdown = False
            self.refresh_segments()

    def compose(self) -> ComposeResult:
        yield SegmentText(self.segments_content(), classes="segments")
        with Collapsible(title="Reasoning", collapsed=True, classes="reasoning"):  # thought before the format
            yield self.reasoning_text
        yield Markdown(classes="markdown")

    def on_mount(self) -> None:
        if self.turn.done:
            self.finish()

    def segments_content(self) -> Content:
        parts: list[tuple[str, Style] | str] = []
        for index, event in enumerate(self.turn.rounds):
            style = Style.parse(self.colours.get(event.author, "white")) if event.author else Style(dim=True)
            if event.phase == "reasoning":  # thinking before the format: drawn dim
                style += Style(dim=True, italic=True)
            if self.tint_sureness:
                style += sureness_style(event.sure)
            style += Style.from_meta({"segment": index})
            if index == self.selected:
                style += Style(reverse=True)
            parts.append((printable(event.text), style))
        if not self.turn.rounds and not self.turn.done:
            parts.append(("drafting the first segment…", Style(italic=True, dim=True)))
        for line in self.member_lines():
            parts.append((f" [{printable(line)}]", Style(italic=True, dim=True)))
        if self.turn.stopped:
            parts.append((" [stopped]", Style(italic=True, dim=True)))
        if self.turn.error:
            parts.append((f" [failed: {printable(self.turn.error)}]", Style(italic=True, dim=True)))
        return Content.assemble(*parts)

    def member_lines(self) -> list[str]:
        """One line per member that was out of this answer or left it (a machine that stopped
        answering), as every front end says it."""
        said: set[str] = set()
        events = [*self.turn.rounds, *([self.turn.final] if self.turn.final is not None else [])]
        return [line for event in events for line in member_news(event, said)]

    def refresh_segments(self) -> None:
        self.query_one(SegmentText).update(self.segments_content())

    def finish(self) -> AwaitComplete:
        """The answer is complete, stopped or failed: show the summary and the Markdown view
        (returned: it is drawn when this completes)."""
        final = self.turn.final
        if final is not None:
            wins = "  ".join(f"{name} {count}" for name, count in self.turn.wins.items() if count)
            sure = f"{'unsure: ' if final.unsure else ''}confidence {final.confidence:.2f}" if final.confidence else ""
            parts = [f"{final.tokens} tok", f"{final.seconds:.1f}s", final.finish_reason, sure, wins]
            self.border_subtitle = printable(" · ".join(part for part in parts if part))
        notes = [*self.member_lines(), self.turn.ending or (finish_note(final) if final is not None else None)]
        if final is not None and final.unsure and final.confidence is not None:
            notes.append(f"the ensemble is unsure of this answer: confidence {final.confidence:.2f}; u shows where")
        if final is not None and final.escalated:
            notes.append(f"the ensemble was unsure: {final.escalated} answered again, alone")
        said = "".join(f"\n\n*({note})*" for note in notes if note)
        drawn = self.query_one(Markdown).update(printable(readable(self.turn.content) + said))
        reasoning = self.turn.reasoning
        self.reasoning_text.update(Content(printable(reasoning)))
        self.refresh_segments()
        self.show_markdown = True
        return drawn

    def watch_show_markdown(self, show: bool) -> None:
        self.query_one(SegmentText).display = not show
        self.query_one(Markdown).display = show
        self.query_one(Collapsible).display = show and bool(self.turn.reasoning)

    def watch_selected(self) -> None:
        if self.is_mounted:
            self.refresh_segments()

    def watch_tint_sureness(self) -> None:
        if self.is_mounted:
            self.refresh_segments()

    def action_toggle_sureness(self) -> None:
        """u: tint each segment by how sure it is (the segments view, where the tint shows)."""
        self.tint_sureness = not self.tint_sureness
        if self.tint_sureness:
            self.show_markdown = False
        self.notify("Segments tinted by how sure each is: red below 0.5, yellow below 0.8." if self.tint_sureness
                    else "Tint by sureness off.")  # fmt: skip

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

    def action_request(self, action: str, step: int = 0) -> None:
        self.post_message(self.Requested(self, action, step))

    def action_copy(self) -> None:
        """The answer's text to the clipboard (OSC 52: works over SSH in most terminals)."""
        self.app.copy_to_clipboard(self.turn.content)
        self.notify(f"Copied the answer ({len(self.turn.content)} characters).")

    def action_copy_code(self) -> None:
        blocks = code_blocks(self.turn.content)
        if not blocks:
            self.notify("This answer has no code block; c copies all of it.")
            return
        self.app.copy_to_clipboard("\n\n".join(blocks))
        self.notify(f"Copied {len(blocks)} code block{'s' if len(blocks) != 1 else ''}.")

    def on_segment_text_clicked(self, message: SegmentText.Clicked) -> None:
        self.focus()
        self.selected = message.index
        self.post_message(self.InspectRequested(self, message.index))
