"""Key bindings and what the colours mean."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# specem-chat

Several local models write one answer together. Each round every model drafts a short
segment, every model scores every draft, and the weighted vote picks the segment that is
added. Each segment is coloured by the model that wrote it; the panel on the right shows each
model's weight, its wins and its drafting speed. The weights are learned during each answer;
they start from the prior or from a calibration (`specem calibrate`; the panel says which,
and Ctrl+R resets them).

| key | action |
|---|---|
| Enter | send the message |
| Shift+Enter, Alt+Enter, Ctrl+J | new line in the message |
| Esc | stop the answer (the partial answer stays, marked stopped) |
| Tab / Shift+Tab | move between the input and the answers |
| Left / Right (on an answer) | select a segment |
| Enter or click (on a segment) | open the candidate inspector for that round |
| m (on an answer) | switch between Markdown and the coloured segments |
| Ctrl+N | new chat |
| Ctrl+O | open a past chat |
| Ctrl+E | export this chat to Markdown |
| F2 | settings for the next answer; add a model found on this disk |
| Ctrl+R | reset the kept weights (the next answer starts from the prior) |
| Ctrl+L | switch to another built-in ensemble (the chat goes on) |
| F1 | this help |
| Ctrl+Q | quit |

Chats are saved automatically.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f1", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Markdown(HELP)
