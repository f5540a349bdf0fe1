"""Key bindings and what the colours mean."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from specem_local.text import printable

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
| [ / ] (on an answer) | its other versions ("2/3"); on the last answer, the chat goes on from the one shown |
| r (on the last answer) | regenerate it with a new seed (the old one stays as a version) |
| e (on the last answer) | edit the question and ask again (the old question and answers are kept) |
| g (in the inspector, last answer) | go on from the highlighted candidate: the answer is cut there and continues |
| k (on the last answer) | compare: each model answers alone, one after another, kept as versions |
| b (on a version of a compared answer) | mark it the best: the weights learn from it |
| + / - (on an answer) | thumbs up / down: the models that wrote it gain / lose weight |
| c / y (on an answer) | copy the answer / its code blocks (works over SSH in most terminals) |
| Ctrl+Z | undo your last pick, thumb, best or reset (in the input box holding text: the typing) |
| Ctrl+N | new chat |
| Ctrl+O | open a past chat |
| Ctrl+E | export this chat to Markdown |
| F2 | settings for the next answer; add a model found on this disk |
| Ctrl+R twice | reset the kept weights and your choices in them (the next answer starts from the prior) |
| Ctrl+L | switch to another built-in ensemble (the chat goes on) |
| F1 | this help |
| Ctrl+Q | quit |

Chats are saved automatically, with every version of every answer. Your picks, thumbs and
best answers are labels: each moves the weights a little (at most x1.28 on the odds between
two models), the panel says how many are in them, and Ctrl+Z takes the last one back.
"""


def leaderboard_markdown(board: dict[str, dict[str, float]]) -> str:
    """``choices.leaderboard`` as a Markdown table (what ``specem weights stats`` prints)."""
    if not board:
        return "\n## Your leaderboard\n\nNothing yet: answers and your choices make it.\n"
    rows = "".join(
        f"| {printable(name)} | {e['segments_won']:g} | +{e['picked']:g} -{e['picked_against']:g} "
        f"| +{e['thumbs_up']:.1f} -{e['thumbs_down']:.1f} | {e['best']:g}/{e['compared']:g} |\n"
        for name, e in board.items()
    )
    return (
        "\n## Your leaderboard\n\nOver your history (`specem weights stats`):\n\n"
        "| model | segments won | picks for / against | thumbs up / down | best in comparisons |\n"
        "|---|---|---|---|---|\n" + rows
    )


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f1", "dismiss", "Close")]

    def __init__(self, board: dict[str, dict[str, float]] | None = None) -> None:
        super().__init__()
        self.board = board

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Markdown(HELP + ("" if self.board is None else leaderboard_markdown(self.board)))
