"""The format compiler's child process: a crash or a stall there is one refused request, and the
next format compiles in a fresh child (issue 43)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from specem_local.engine.format_compiler import COMMAND, FormatCompiler
from specem_local.engine.formats import MAX_RULES, output_format_from
from specem_local.errors import SettingError

SCHEMA = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
# A child that answers nothing and dies of the signal named, or sleeps: crashes the compiler
# cannot catch, and a stall.
DIES = "import os, signal; os.kill(os.getpid(), signal.{})"


def test_a_compiler_that_crashes_is_one_refused_request_then_a_fresh_child_compiles():
    crashing = FormatCompiler(command=[sys.executable, "-c", DIES.format("SIGSEGV")])
    with pytest.raises(SettingError, match=r"^schema: the format compiler crashed on it \(SIGSEGV\)") as caught:
        crashing.compile("schema", SCHEMA, "schema")
    assert caught.value.field == "schema"
    crashing._command = [sys.executable, "-c", COMMAND]
    assert "grammars" in crashing.compile("schema", SCHEMA, "schema").grammar
    crashing.close()


def test_a_compile_past_the_time_bound_is_ended_and_refused_within_it():
    stalling = FormatCompiler(seconds=0.5, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    with pytest.raises(SettingError, match=r"^grammar: took longer than 0.5 s to compile"):
        stalling.compile("grammar", "start: 'a'", "grammar")
    assert time.monotonic() - started < 3
    assert stalling._process is None  # ended, not left running
    stalling.close()


def test_the_real_child_compiles_and_refuses_in_one_line():
    real = FormatCompiler()
    assert real.compile("regex", "[a-z]+", "regex").grammar
    with pytest.raises(SettingError, match=r"^regex: cannot be enforced: .*unclosed group"):
        real.compile("regex", "a(b", "regex")
    assert real.compile("regex", "b+", "regex").grammar  # the same child goes on
    real.close()


def test_a_grammar_of_too_many_rules_is_refused_before_it_is_compiled():
    chained = "start: r0\n" + "".join(f'r{i}: "a" r{i + 1}?\n' for i in range(4000)) + 'r4000: "b"\n'
    started = time.monotonic()
    with pytest.raises(SettingError, match=f"4,002 rules is too many \\(at most {MAX_RULES}\\)"):
        output_format_from(grammar=chained)
    gbnf = "root ::= r0\n" + "".join(f'r{i} ::= "a" r{i + 1}?\n' for i in range(8000)) + 'r8000 ::= "b"\n'
    with pytest.raises(SettingError, match="rules is too many"):
        output_format_from(grammar=gbnf)
    assert time.monotonic() - started < 2  # counted, not converted
    usual = "start: r0\n" + "".join(f'r{i}: "a" r{i + 1}?\n' for i in range(400)) + 'r400: "b"\n'
    assert output_format_from(grammar=usual)
