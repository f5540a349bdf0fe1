"""Behaviours only slow tests (real models, a real terminal) held, held here on fake members:
Ctrl-C cancels the answers still running rather than waiting for them, a batch line's own format
wins over the command's, the progress bar is for a terminal only, a budget that cuts the
thinking is told to the members, and ``specem run --schema --think`` prints the JSON alone."""

from __future__ import annotations

import io
import json
import time

import pytest

from specem_local.commands import batch
from specem_local.commands import run as run_command
from specem_local.engine import Ensemble, thinking
from specem_local.events import FinalEvent
from specem_local.settings import EnsembleSettings
from tests.engine.conftest import QUESTION, fake_ensemble
from tests.engine.test_batch_on_fakes import echoes, lines, results
from tests.engine.test_cli_on_fakes import members, run
from tests.engine.test_places import ensemble
from tests.engine.test_thinking import REPLY, SCHEMA, WORKING, Thinker, thinker

__all__ = ["members"]  # the fixture

LONG = {"max_tokens": 1000, "ignore_eos": True}  # about 12 s each at 10 ms a decode, if nobody cancels it


def slow(models) -> None:
    """Every decode takes 10 ms: a short answer takes about half a second, a long one seconds."""
    for model in models:
        model.on_decode = lambda _model, _rows: time.sleep(0.01)


def test_ctrl_c_in_the_reader_of_answers_cancels_the_running_ones_at_once():
    with ensemble(3) as running:
        slow(running.runner.models)
        streams = {}
        items = ["apple", {"prompt": "river", **LONG}, {"prompt": "stone", **LONG}]
        answered = running.answers(items, started=lambda index, stream: streams.update({index: stream}))
        with pytest.raises(KeyboardInterrupt):
            for got in answered:
                assert got.index == 0 and got.final is not None  # the short one; the long ones run
                interrupted = time.monotonic()
                raise KeyboardInterrupt
        answered.close()
        assert time.monotonic() - interrupted < 3  # cancelled, not waited for
        ended = [streams[index].final() for index in (1, 2)]
        assert [final.finish_reason for final in ended] == ["cancelled", "cancelled"]
        assert all(final.tokens < LONG["max_tokens"] for final in ended)
        assert running.generate("again").text.startswith("You said again")  # the places are free


def test_ctrl_c_on_a_batch_cancels_the_running_answers_at_once(members, capsys, tmp_path, monkeypatch):
    made = echoes()
    slow(member.model for member in made)

    def from_config(cls, config=None, **overrides):  # the fakes, with the places --parallel asks for
        settings = EnsembleSettings(**{"greedy": True, "reasoning_budget": 0, **overrides})
        return Ensemble(made, settings, parallel=config.load.parallel)

    monkeypatch.setattr(Ensemble, "from_config", classmethod(from_config))
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    long_lines = ({"id": word, "prompt": word, **LONG} for word in ("river", "stone"))
    lines(source, {"id": "short", "prompt": "apple"}, *long_lines)
    streams = []
    monkeypatch.setattr(run_command, "batch_recorder", lambda: lambda _line, stream: streams.append(stream))
    interrupted: list[float] = []

    def tick(self) -> None:  # Ctrl-C while the batch writes the short answer's result
        interrupted.append(time.monotonic())
        raise KeyboardInterrupt

    monkeypatch.setattr(batch.Progress, "tick", tick)
    code, out, _ = run(capsys, "--batch", str(source), "-o", str(target), "--parallel", "3")
    assert code == 130 and out == ""
    assert time.monotonic() - interrupted[0] < 3  # cancelled, not waited for
    assert sorted(results(target)) == ["short"]  # the cancelled answers are left for a rerun
    finals = [stream.final() for stream in streams]  # the three ran together
    assert sorted(final.finish_reason for final in finals) == ["cancelled", "cancelled", "eos"]


def test_a_lines_own_format_is_used_when_the_command_has_one_too(members, capsys, tmp_path):
    members += echoes()
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "string", "enum": ["apple", "river"]}))
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines(source, {"id": "own", "prompt": "cloud", "regex": "You said [a-z]+"}, {"id": "command's", "prompt": "apple"})
    code, _, err = run(capsys, "--batch", str(source), "-o", str(target), "--schema", str(schema))
    assert code == 0, err
    got = results(target)
    assert got["own"]["text"] == got["own"]["parsed"] == "You said cloud"  # its regex, not the command's schema
    assert got["command's"]["parsed"] in ("apple", "river")  # a line without a format of its own: the command's


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_is_written_on_a_terminal_only(members, capsys, tmp_path, monkeypatch):
    members += echoes()
    source = tmp_path / "in.jsonl"
    lines(source, {"id": "a", "prompt": "apple"}, {"id": "b", "prompt": "river"})
    code, _, err = run(capsys, "--batch", str(source), "-o", str(tmp_path / "out.jsonl"))
    assert code == 0 and "answers/min" not in err and "\x1b" not in err and "\r" not in err
    assert err == f"specem: 2 of 2 answered into {tmp_path / 'out.jsonl'}\n"
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    members[:] = echoes()
    assert run(capsys, "--batch", str(source), "-o", str(tmp_path / "again.jsonl"))[0] == 0
    shown = terminal.getvalue()
    assert "\r\x1b[K[2/2]" in shown and "answers/min" in shown  # on a terminal it is there: the check above can fail


class Reading(Thinker):
    """A ``Thinker`` that keeps every text it was given to continue."""

    def next_logits(self, history: list[int]):
        self.read.append(b"".join(self.pieces[t] for t in history).decode(errors="replace"))
        return super().next_logits(history)


def readers() -> list:
    made = [thinker("a"), thinker("b")]
    for member in made:
        member.model.__class__ = Reading
        member.model.read = []
    return made


@pytest.mark.parametrize("bridge", ["new-turn", "same-turn"])
def test_a_budget_that_cuts_the_thinking_is_told_to_the_members(bridge):
    for budget, switch in ((8, "budget"), (256, "eos")):
        members = readers()
        with fake_ensemble(*members, reasoning_budget=256) as ensemble:
            final = ensemble.generate(QUESTION, schema=SCHEMA, max_tokens=400, think=budget, think_bridge=bridge)
        assert isinstance(final, FinalEvent) and final.switched == switch and final.text == REPLY
        for member in members:  # the format's phase: asked for the final answer, after the reasoning
            after = [text for text in member.model.read if "final answer" in text.lower()]
            assert after and all(final.reasoning in text for text in after), "no member read the answer's phase"
            told = [thinking.CUT in text for text in after]
            assert all(told) if switch == "budget" else not any(told), (bridge, switch)


def test_run_with_a_schema_and_thinking_prints_the_json_alone_on_stdout(members, capsys, tmp_path):
    members += [thinker("a"), thinker("b")]
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    code, out, err = run(capsys, "--max-tokens", "200", "--schema", str(schema), "--think", "low", "--no-log", QUESTION)
    assert code == 0, err
    assert out == REPLY + "\n" and json.loads(out) == {"answer": 42}  # the JSON alone
    assert WORKING in err  # the thinking went to stderr
