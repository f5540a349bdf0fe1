"""An answer on the terminal, as ``specem run``'s flags ask: the text as it streams (each segment
coloured by its author with ``--authors``, or ``«name»`` where colour is off), the events as JSON
lines (``--json``), a formatted answer's parsed form alone on stdout, and on stderr what a person
should know (members leaving, how it ended, how sure it is, who answered again)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from specem_local.commands.terminal import ignore_stop_signals, interrupted_code, printable
from specem_local.errors import SpecemError
from specem_local.events import FinalEvent, RoundEvent, StartEvent, finish_note, member_news

if TYPE_CHECKING:
    from specem_local.engine import AnswerStream

ANSI_COLOURS = {
    "red": 31,
    "green": 32,
    "yellow": 33,
    "blue": 34,
    "magenta": 35,
    "cyan": 36,
    "white": 37,
    "bright_red": 91,
    "bright_green": 92,
    "bright_yellow": 93,
    "bright_blue": 94,
    "bright_magenta": 95,
    "bright_cyan": 96,
}


class AnswerPrinter:
    """One answer's events on the terminal, as ``specem run``'s flags ask."""

    def __init__(
        self, args: argparse.Namespace, colours: dict[str, str], formatted: bool, max_tokens: int,
        escalating: bool = False,
    ) -> None:  # fmt: skip
        self.args, self.colours, self.formatted, self.max_tokens = args, colours, formatted, max_tokens
        self.colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        self.said: set[str] = set()  # members said to be out of the answer
        # an answer that may be answered again (escalate_below, a reserve member), read by a
        # program: its text is held and printed once, the one given, never two answers in a row
        self.holding = escalating and not formatted and not args.json and not sys.stdout.isatty()

    def answer(self, stream: AnswerStream, last: bool = True) -> tuple[FinalEvent | None, int]:
        """Show the answer as it streams (``last``: its parsed form too, for a format); its final
        event, or None and the exit code when it was stopped."""
        args, previous_author, origin = self.args, None, ""
        final = None
        try:
            for event in stream:
                for line in [] if args.json else member_news(event, self.said):  # --json: the events carry it
                    print(f"\n[{printable(line)}]", file=sys.stderr, flush=True)
                if args.json:
                    print(json.dumps(event.to_dict(), ensure_ascii=False), flush=True)
                elif isinstance(event, StartEvent):
                    origin = event.weights_origin
                    for note in event.notes:
                        print(f"specem: note: {printable(note)}", file=sys.stderr, flush=True)
                elif isinstance(event, RoundEvent) and self.formatted:
                    if event.phase == "reasoning" and not args.hide_thinking:  # the thinking, on stderr
                        shown = printable(event.text)
                        sys.stderr.write(f"\x1b[2m{shown}\x1b[0m" if sys.stderr.isatty() else shown)
                        sys.stderr.flush()
                elif isinstance(event, RoundEvent) and not self.holding:
                    self.segment(event, previous_author)
                    previous_author = event.author
                elif isinstance(event, FinalEvent):
                    self.ended(event, origin, last)
                if isinstance(event, FinalEvent):
                    final = event
        except KeyboardInterrupt as stopped:  # Ctrl-C, or SIGTERM / SIGHUP (Terminated)
            ignore_stop_signals()
            stream.cancel()
            stream.final()  # what it wrote, recorded as stopped
            print("\n[stopped]", file=sys.stderr)
            return None, interrupted_code(stopped)
        return final, 0

    def segment(self, event: RoundEvent, previous_author: str | None) -> None:
        if self.args.authors and self.colour:
            code = ANSI_COLOURS.get(self.colours.get(event.author, ""), 0)
            sys.stdout.write(f"\x1b[{code}m{printable(event.text)}\x1b[0m")
        elif self.args.authors and event.author != previous_author:
            sys.stdout.write(f"«{printable(event.author)}»{printable(event.text)}")
        else:
            sys.stdout.write(printable(event.text))
        sys.stdout.flush()

    def ended(self, event: FinalEvent, origin: str, last: bool) -> None:
        if self.formatted:
            if event.reasoning and not self.args.hide_thinking:
                print(file=sys.stderr)  # the thinking's last line ends before the answer
            if last:
                self.parsed(event)
                sure_line(event)
            return
        print(printable(event.text) if self.holding else "", flush=True)
        ending = finish_note(event)
        if ending:
            print(f"[{ending}]", file=sys.stderr)
        escalation_lines(event, again=not self.holding)
        sure_line(event)
        if self.args.authors:
            print_legend(event, self.colours, self.colour, origin)

    def parsed(self, final: FinalEvent) -> None:
        if not self.args.json:
            print_parsed(final, self.max_tokens, bare=self.args.choices is not None)


def sure_line(final: FinalEvent) -> None:
    """How sure the answer is, on stderr: ``[confidence 0.83]``, ``[unsure: confidence 0.21]``."""
    if final.confidence is not None:
        said = "unsure: confidence" if final.unsure else "confidence"
        print(f"[{said} {final.confidence:.2f}]", file=sys.stderr, flush=True)


def escalation_lines(final: FinalEvent, again: bool = True) -> None:
    """An answer the ensemble was unsure of, answered again by its reserve member: said on
    stderr, and (``again``: the ensemble's was streamed) the reserve's answer printed after it."""
    if final.escalated:
        print(f"[the ensemble was unsure: {printable(final.escalated)} answered again]", file=sys.stderr, flush=True)
        if again:
            print(printable(final.text) if sys.stdout.isatty() else final.text, flush=True)


def print_parsed(final: FinalEvent, max_tokens: int, bare: bool = False) -> None:
    """A constrained answer on stdout, alone (for a script to read), once it is whole; with
    tools, the calls as a JSON list, or the message; ``bare`` (``--choices``): the option
    itself, not its JSON."""
    from specem_local.engine import ToolReply

    if isinstance(final.parsed, ToolReply):
        reply = final.parsed
        calls = [{"name": call.name, "arguments": call.arguments} for call in reply.calls]
        text = json.dumps(calls, ensure_ascii=False) if calls else reply.content or ""
        print(printable(text) if sys.stdout.isatty() else text, flush=True)
        return
    if final.parsed is None and not _whole_null(final):
        why = {
            "length": f"was cut at max_tokens ({max_tokens}) before it was whole; raise --max-tokens",
            "cancelled": "was stopped before it was whole",
        }.get(final.finish_reason, f"ended ({final.finish_reason}) before it was whole")
        raise SpecemError(f"the answer {why}")
    text = final.parsed if bare and isinstance(final.parsed, str) else final.text
    print(printable(text) if sys.stdout.isatty() else text, flush=True)


def _whole_null(final: FinalEvent) -> bool:
    """A whole answer that is JSON's ``null`` (an option of an enum), which parses to None too."""
    try:
        return final.finish_reason == "eos" and json.loads(final.text) is None
    except ValueError:
        return False


def print_legend(final: FinalEvent, colours: dict[str, str], colour: bool, origin: str) -> None:
    parts = []
    for name, wins in final.wins.items():
        code = ANSI_COLOURS.get(colours.get(name, ""), 0)
        weight = final.weights.get(name)
        weight_text = f", weight {weight:.2f}" if weight is not None else ""
        label = f"\x1b[{code}m■ {printable(name)}\x1b[0m" if colour else f"«{printable(name)}»"
        parts.append(f"{label} ({wins} segments{weight_text})")
    print("  ".join(parts))
    print(
        f"{final.tokens} tokens in {final.seconds:.1f} s ({final.tokens_per_second:.1f} tok/s), "
        f"{final.rounds} rounds, {final.drafters_per_round:.1f} drafters/round, finish: {final.finish_reason}; "
        f"weights started from {origin}"
    )
