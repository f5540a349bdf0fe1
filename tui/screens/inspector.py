"""The candidate inspector: every model's candidate for one round, each verifier's score,
the combined vote, and why the winner won (as the vote itself says: ``vote.explain``).
Left/Right step through the rounds; on the last answer, g goes on from the highlighted
candidate (the answer is cut at that round and continues from it)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.style import Style
from textual.widgets import DataTable, Footer, Static

from specem_local.engine import candidate_label, explain, winning_candidate
from specem_local.events import Candidate, RoundEvent
from specem_local.text import printable


def sureness_said(event: RoundEvent) -> str:
    """Why a segment is as sure as it is: its author's least token probability, and for a
    voted round the winner's lead and how many verifiers ranked it first."""
    if event.sure is None:
        return ""
    facts = []
    if event.least_probability is not None:
        facts.append(f"its least likely token had probability {event.least_probability:.2f} for {event.author}")
    if event.margin is not None:
        facts.append(f"it led the runner-up by {event.margin:.2f} of the vote")
    if event.agreement is not None:
        facts.append(f"{event.agreement:.0%} of the verifiers ranked it first")
    return f" Sure: {event.sure:.2f} ({'; '.join(facts)})." if facts else f" Sure: {event.sure:.2f}."


class InspectorScreen(ModalScreen[tuple[int, Candidate] | None]):
    BINDINGS = [
        Binding("escape,q", "dismiss", "Close"),
        Binding("left,p", "step(-1)", "Prev round", priority=True),
        Binding("right,n", "step(1)", "Next round", priority=True),
        Binding("g", "go_on", "Go on from this one"),
    ]

    def __init__(self, rounds: list[RoundEvent], index: int, colours: dict[str, str], can_go_on: bool = False) -> None:
        super().__init__()
        self.rounds = rounds
        self.index = index
        self.colours = colours
        self.can_go_on = can_go_on
        self.highlighted: str | None = None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.can_go_on if action == "go_on" else True

    def action_go_on(self) -> None:
        """Dismiss with (round index, the highlighted candidate): the chat goes on from it."""
        candidate = next((c for c in self.event.candidates if candidate_label(c) == self.highlighted), None)
        if candidate is None or candidate is winning_candidate(self.event):  # a forced round has none
            self.notify("Highlight a candidate other than the winner (★) to go on from it.")
            return
        self.dismiss((self.index, candidate))

    def compose(self) -> ComposeResult:
        with Vertical(id="inspector"):
            yield Static(id="why")
            yield DataTable(id="candidates", cursor_type="row", zebra_stripes=True)
            yield Static(id="detail")
            yield Footer()

    def on_mount(self) -> None:
        self.show_round()
        self.query_one(DataTable).focus()

    @property
    def event(self) -> RoundEvent:
        return self.rounds[self.index]

    def show_round(self) -> None:
        event = self.event
        self.query_one(
            "#inspector"
        ).border_title = f"Round {event.index} of {len(self.rounds)}  (←/→ rounds · ↑/↓ each candidate in full)"
        self.query_one("#why", Static).update(printable(explain(event) + sureness_said(event)))
        table = self.query_one(DataTable)
        table.clear(columns=True)
        if not event.candidates:  # text the answer's format forced: nothing was drafted or voted on
            self.highlighted = None
            self.query_one("#detail", Static).update(Content(f"forced by the format: {printable(event.text)}"))
            return
        # an answer among options: each source's belief (asked:NAME, scored:NAME); else each verifier's share
        verifiers = list(event.candidates[0].shares) if event.candidates[0].option else list(event.weights)
        table.add_column("", width=1)
        labels = [printable(candidate_label(c)) for c in event.candidates]
        table.add_column("model", width=max(map(len, labels)))  # whole names: the table scrolls sideways
        table.add_columns("vote", *[f"by {printable(v)}" for v in verifiers])
        won = winning_candidate(event)
        for candidate in sorted(event.candidates, key=lambda c: -(c.combined or 0)):
            colour = Style.parse(self.colours.get(candidate.model, "white"))
            cells: list[str | Content] = [
                "★" if candidate is won else "",
                Content.styled(printable(candidate_label(candidate)), colour),
                "-" if candidate.combined is None else f"{candidate.combined:.3f}",
            ]
            for verifier in verifiers:
                share = candidate.shares.get(verifier)
                cells.append("-" if share is None else f"{share:.3f}")
            table.add_row(*cells, key=candidate_label(candidate))
        self.show_detail(candidate_label(won))

    def show_detail(self, key: str) -> None:
        """The highlighted candidate in full, with each verifier's raw score."""
        self.highlighted = key
        candidate = next(c for c in self.event.candidates if candidate_label(c) == key)
        raw = printable(", ".join(f"{verifier} {score:+.3f}" for verifier, score in candidate.scores.items()))
        ended = " (ends the answer)" if candidate.ended else ""
        self.query_one("#detail", Static).update(
            Content.assemble(
                (f"{printable(key)}{ended}: ", Style.parse(self.colours.get(candidate.model, "white"))),
                printable(candidate.text),
                f"\nraw scores (mean per token): {raw or 'none'}",
            )
        )

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self.show_detail(event.row_key.value)

    def action_step(self, step: int) -> None:
        self.index = max(0, min(len(self.rounds) - 1, self.index + step))
        self.show_round()
