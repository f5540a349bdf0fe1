"""``specem run``'s lines on the terminal, to the letter (commands/answer_printer.py): how sure
an answer is, who answered again, the parsed form alone on stdout, and the legend."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from specem_local.commands import answer_printer as printer
from specem_local.engine import ToolReply
from specem_local.engine.tools import ToolCall
from specem_local.errors import SpecemError
from specem_local.events import FinalEvent, StartEvent

FINAL = FinalEvent("the answer", "eos", 4, 20, 2.0, 0.5, {"a": 3, "b": 1}, 1.5, {"a": 0.75}, False)


def test_how_sure_is_said_on_stderr_and_unsure_is_marked(capsys):
    printer.sure_line(dataclasses.replace(FINAL, confidence=0.834))
    printer.sure_line(dataclasses.replace(FINAL, confidence=0.21, unsure=True))
    printer.sure_line(FINAL)  # no confidence: nothing said
    assert capsys.readouterr() == ("", "[confidence 0.83]\n[unsure: confidence 0.21]\n")


def test_an_escalated_answer_says_who_answered_again_and_prints_its_answer(capsys):
    printer.escalation_lines(dataclasses.replace(FINAL, escalated="big", text="42"))
    printer.escalation_lines(FINAL)
    assert capsys.readouterr() == ("42\n", "[the ensemble was unsure: big answered again]\n")


def test_the_parsed_form_is_printed_alone_and_an_unfinished_one_says_why():
    with pytest.raises(SpecemError, match=r"^the answer was cut at max_tokens \(7\) before it was whole; raise"):
        printer.print_parsed(dataclasses.replace(FINAL, finish_reason="length"), 7)
    with pytest.raises(SpecemError, match=r"^the answer was stopped before it was whole$"):
        printer.print_parsed(dataclasses.replace(FINAL, finish_reason="cancelled"), 7)
    with pytest.raises(SpecemError, match=r"^the answer ended \(stop\) before it was whole$"):
        printer.print_parsed(dataclasses.replace(FINAL, finish_reason="stop"), 7)


def test_an_answer_that_is_json_null_is_whole_and_printed_as_written(capsys):
    printer.print_parsed(dataclasses.replace(FINAL, text=" null"), 7)  # an enum's null, chosen
    printer.print_parsed(dataclasses.replace(FINAL, text="null"), 7, bare=True)
    assert capsys.readouterr().out == " null\nnull\n"
    for cut in (dataclasses.replace(FINAL, text="nul"), dataclasses.replace(FINAL, text="null", finish_reason="stop")):
        with pytest.raises(SpecemError, match="before it was whole"):
            printer.print_parsed(cut, 7)


def test_tool_calls_print_as_a_json_list_of_names_and_arguments(capsys):
    printer.print_parsed(dataclasses.replace(FINAL, parsed=ToolReply((ToolCall("add", {"x": 1}),))), 7)
    printer.print_parsed(dataclasses.replace(FINAL, parsed=ToolReply(content="no call")), 7)
    printer.print_parsed(dataclasses.replace(FINAL, text='"cat"', parsed="cat"), 7, bare=True)
    printer.print_parsed(dataclasses.replace(FINAL, text='"cat"', parsed="cat"), 7)
    assert capsys.readouterr().out == '[{"name": "add", "arguments": {"x": 1}}]\nno call\ncat\n"cat"\n'


def test_the_legend_names_each_author_its_segments_and_weight(capsys):
    printer.print_legend(FINAL, {"a": "green"}, False, "the shipped weights")
    legend, totals = capsys.readouterr().out.splitlines()
    assert legend == "«a» (3 segments, weight 0.75)  «b» (1 segments)"
    assert totals.endswith("finish: eos; weights started from the shipped weights")
    printer.print_legend(FINAL, {"a": "green"}, True, "x")
    assert capsys.readouterr().out.startswith("\x1b[32m■ a\x1b[0m (3 segments, weight 0.75)  \x1b[0m■ b\x1b[0m")


class Stream:
    """The few things AnswerPrinter asks of an AnswerStream: its events, cancel and final."""

    def __init__(self, events, stop_after=None):
        self.events, self.stop_after, self.calls = events, stop_after, []

    def __iter__(self):
        for i, event in enumerate(self.events):
            if i == self.stop_after:
                raise KeyboardInterrupt
            yield event

    def cancel(self):
        self.calls.append("cancel")

    def final(self):
        self.calls.append("final")


def shown(**flags):
    args = {"json": False, "authors": False, "hide_thinking": False, "choices": None, **flags}
    return printer.AnswerPrinter(argparse.Namespace(**args), {"a": "green"}, False, 20)


def test_json_lines_keep_text_as_written(capsys):
    final, code = shown(json=True).answer(Stream([dataclasses.replace(FINAL, text="café ☕")]))
    assert code == 0 and final.text == "café ☕"
    assert '"text": "café ☕"' in capsys.readouterr().out


def test_a_stopped_answer_is_cancelled_recorded_and_said_so(capsys, monkeypatch):
    monkeypatch.setattr(printer, "ignore_stop_signals", lambda: None)  # pytest keeps its own Ctrl-C
    stream = Stream([FINAL], stop_after=0)
    assert shown().answer(stream) == (None, 130)
    assert stream.calls == ["cancel", "final"]
    assert capsys.readouterr().err == "\n[stopped]\n"


def test_the_legend_is_coloured_and_says_where_the_weights_started(capsys):
    start = StartEvent(("a", "b"), ("a", "b"), {"a": 0.5, "b": 0.5}, {"a": 3, "b": 3}, False, weights_from="built-in")
    terminal = shown(authors=True)
    terminal.colour = True
    terminal.answer(Stream([start, FINAL]))
    out = capsys.readouterr().out
    assert "\x1b[32m■ a\x1b[0m (3 segments, weight 0.75)" in out
    assert out.rstrip().endswith(f"weights started from {start.weights_origin}")


def test_an_answer_that_may_be_escalated_is_printed_once_for_a_program(capsys):
    """stdout not a terminal (capsys): with a reserve and escalate_below, the ensemble's segments
    are held and only the answer given is printed; streamed, both would be, one after the other."""
    from specem_local.events import RoundEvent

    segment = RoundEvent(1, "It is 7.", "a", "vote", (), {}, (), {}, {}, {}, 0.1, 4)  # type: ignore[arg-type]
    escalated = dataclasses.replace(FINAL, text="It is 42.", escalated="big", ensemble_text="It is 7.")
    args = argparse.Namespace(json=False, authors=False, hide_thinking=False, choices=None)
    held = printer.AnswerPrinter(args, {}, False, 20, escalating=True)
    assert held.answer(Stream([segment, escalated]))[1] == 0
    assert capsys.readouterr() == ("It is 42.\n", "[the ensemble was unsure: big answered again]\n")
    held.answer(Stream([segment, dataclasses.replace(FINAL, text="It is 7.")]))
    assert capsys.readouterr().out == "It is 7.\n"
    streamed = printer.AnswerPrinter(args, {}, False, 20)
    streamed.answer(Stream([segment, escalated]))
    assert capsys.readouterr().out == "It is 7.\nIt is 42.\n"
    assert not printer.AnswerPrinter(args, {}, True, 20, escalating=True).holding  # a format prints its parsed form
