"""``specem run --batch``'s pieces to the letter (the survivors of a mutation run): what a line of
OUT holds, how OUT is read back, the progress line, and the one-line refusals with their fields."""

from __future__ import annotations

import dataclasses
import io
import json
import time

import pytest

from specem_local.commands import batch
from specem_local.commands.batch import BatchLine, Progress, Results, answered_records, parse_line, result_of
from specem_local.errors import SettingError
from specem_local.events import FinalEvent
from tests.engine.test_batch_on_fakes import echoes, lines, results
from tests.engine.test_cli_on_fakes import members, run

__all__ = ["members"]  # the fixture


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def final(text: str = "Paris.", finish: str = "eos", seconds: float = 1.23456) -> FinalEvent:
    return FinalEvent(text, finish, 2, 3, seconds, 0.1, {"a": 2}, 1.0, {"a": 1.0}, False)  # type: ignore[arg-type]


def test_a_result_line_holds_the_answer_rounded_to_the_millisecond():
    line = BatchLine("x", 3, None)
    assert result_of(line, final(), None) == {
        "id": "x", "line": 3, "text": "Paris.", "parsed": None, "finish_reason": "eos", "tokens": 3, "seconds": 1.235,
    }  # fmt: skip
    assert result_of(line, None, "bad") == {"id": "x", "line": 3, "error": "bad"}


def test_a_result_line_says_how_sure_and_who_answered_instead():
    """A line's text may be the reserve member's (``escalate_below``): it says so and keeps the
    ensemble's; an answer below ``abstain_below`` is marked there, as everywhere."""
    line = BatchLine("x", 3, None)
    unsure = dataclasses.replace(final(), confidence=0.123456, unsure=True)
    assert result_of(line, unsure, None) == {**result_of(line, final(), None), "confidence": 0.1235, "unsure": True}
    given = dataclasses.replace(final("Lyon."), confidence=0.9, escalated="big", ensemble_text="Paris.")
    said = result_of(line, given, None)
    assert (said["text"], said["escalated"], said["ensemble_text"], said["unsure"]) == ("Lyon.", "big", "Paris.", False)
    assert "escalated" not in result_of(line, unsure, None)


def test_a_cancelled_answer_is_not_written_so_a_rerun_answers_it(tmp_path):
    sink = Results(tmp_path / "out.jsonl")
    progress = Progress(1, io.StringIO())
    assert batch._write(sink, BatchLine("x", 1, None), final(finish="cancelled"), None, progress) == 0
    sink.close()
    assert (tmp_path / "out.jsonl").read_text() == "" and progress.done == 0


def test_an_error_said_over_a_shown_progress_line_clears_it_first(capsys):
    progress = Progress(2, Terminal())
    sink = Results.__new__(Results)
    sink.add = lambda record: None  # type: ignore[method-assign]
    batch._write(sink, BatchLine("x", 4, None), None, "not JSON", progress)
    assert capsys.readouterr().err == "\r\x1b[Kspecem: line 4 (id x): not JSON\n"


def test_answered_records_are_those_with_an_answer_and_never_an_error_record(tmp_path):
    out = tmp_path / "out.jsonl"
    records = [{"id": "a", "text": "x"}, {"id": "z", "error": "bad"}, {"id": "b", "error": "bad"}]
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert set(answered_records(out, {"a", "b"})) == {"a"}  # z's error record is kept (not asked), but is no answer
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["a", "z"]


def test_a_lines_content_id_does_not_depend_on_the_order_of_its_keys():
    first = parse_line(json.dumps({"prompt": "x", "max_tokens": 5}), 1, {})
    second = parse_line(json.dumps({"max_tokens": 5, "prompt": "x"}), 2, {})
    assert first.id == second.id and first.id.startswith("#") and len(first.id) == 13


def test_a_line_with_both_a_prompt_and_messages_says_so():
    line = parse_line(json.dumps({"id": "x", "prompt": "a", "messages": [{"role": "user", "content": "b"}]}), 1, {})
    assert line.ask is None and line.error == 'give "prompt" or "messages", not both'


def test_the_progress_line_counts_the_rate_and_what_is_left(monkeypatch):
    clock = iter([0.0, 60.0, 120.0, 7200.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    shown = Terminal()
    progress = Progress(10, shown)
    progress.tick()  # 1 answer in 1 minute: 9 left at 1.0 a minute
    assert shown.getvalue().endswith("[1/10] 1.0 answers/min, ETA 9.0 min")
    progress.tick()  # 2 in 2 minutes: 8 left
    assert shown.getvalue().endswith("[2/10] 1.0 answers/min, ETA 8.0 min")
    progress.total = 200
    progress.tick()  # 3 in 120 minutes: 197 left at 0.025 a minute = 7880 minutes
    assert shown.getvalue().endswith("[3/200] 0.0 answers/min, ETA 131h20m")


def test_the_progress_line_at_its_very_start_divides_by_nothing(monkeypatch):
    monkeypatch.setattr(time, "monotonic", lambda: 5.0)
    shown = Terminal()
    Progress(3, shown).tick()
    assert shown.getvalue().endswith("[1/3] 0.0 answers/min, ETA 0.0 min")


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ((None, None, None), "prompt"),
        (("hi", None, "out.jsonl"), "output"),
        (("hi", "in.jsonl", "out.jsonl"), "prompt"),
    ],
)
def test_a_bad_batch_argument_names_its_field(arguments, field):
    with pytest.raises(SettingError) as refused:
        batch.check_batch_arguments(*arguments)
    assert refused.value.field == field


def test_an_out_that_is_a_folder_names_the_output_field(tmp_path):
    with pytest.raises(SettingError) as refused:
        batch.check_output(tmp_path)
    assert refused.value.field == "output"


def test_a_bug_in_one_line_is_its_error_record_said_as_unexpected(members, capsys, tmp_path, monkeypatch):
    from specem_local.engine import Ensemble

    members += echoes()
    real = Ensemble.stream

    def stream(self, prompt, **options):
        if getattr(prompt, "prompt", prompt) == "stone":
            raise TypeError("a bug in one item")
        return real(self, prompt, **options)

    monkeypatch.setattr(Ensemble, "stream", stream)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, {"id": "a", "prompt": "apple"}, {"id": "s", "prompt": "stone"})
    assert run(capsys, "--batch", str(source), "-o", str(target))[0] == 1
    got = results(target)
    assert got["s"]["error"] == "unexpected TypeError: a bug in one item" and got["a"]["text"].startswith("You said")


def test_the_commands_format_reaches_a_line_without_its_own(members, capsys, tmp_path):
    members += echoes()
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, {"id": "a", "prompt": "apple"})
    assert run(capsys, "--batch", str(source), "-o", str(target), "--regex", "You said [a-z]+")[0] == 0
    assert results(target)["a"]["parsed"] == "You said apple"
