"""The format compiler's child process: a crash or a stall there is one refused request, and the
next format compiles in a fresh child (issue 43)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable

import pytest

from specem_local.engine.format_compiler import COMMAND, FormatCompiler
from specem_local.engine.formats import MAX_RULES, output_format_from
from specem_local.errors import SettingError
from tests.conftest import poll_until

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


# -- a fork of this process (multiprocessing's fork start method, a test runner that forks) ---------
def in_a_fork(work: Callable[[], object], seconds: float = 15) -> None:
    """Run ``work`` in a forked copy of this process; fail if it raises, or hangs past ``seconds``
    (the copy is killed then, never left running)."""
    pid = os.fork()
    if pid == 0:  # the copy: never back into pytest
        code = 1
        try:
            work()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + seconds
    while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"the forked copy did not finish within {seconds} s")
        time.sleep(0.02)
    assert os.waitstatus_to_exitcode(ended[1]) == 0, "the forked copy failed (its traceback is on stderr)"


def compile_a_regex() -> None:
    assert output_format_from(regex="[0-9]+ fork").grammar


def test_a_forked_copy_compiles_after_this_process_has_compiled():
    output_format_from(regex="[a-z]+ parent")  # this process's compiler and launcher are started
    in_a_fork(compile_a_regex)
    assert output_format_from(regex="[a-z]+ after").grammar  # the parent's compiler goes on


def test_a_forked_copy_compiles_with_a_compiler_that_compiled_nothing_before():
    fresh = FormatCompiler()
    in_a_fork(lambda: fresh.compile("regex", "[a-z]+", "regex"))
    assert fresh.compile("regex", "[0-9]+", "regex").grammar  # the copy's child was its own
    fresh.close()


def test_a_fork_while_a_compile_is_in_flight_compiles_in_the_copy():
    stalling = FormatCompiler(seconds=3, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    failed: list[BaseException] = []

    def stall() -> None:
        try:
            stalling.compile("regex", "[a-z]+", "regex")
        except SettingError as error:
            failed.append(error)

    thread = threading.Thread(target=stall)
    thread.start()
    poll_until(lambda: stalling._process is not None, 5, "the stalling compile started")

    def in_the_copy() -> None:  # the lock is held by a thread the fork did not copy
        stalling._command = [sys.executable, "-c", COMMAND]
        assert stalling.compile("regex", "[0-9]+", "regex").grammar

    in_a_fork(in_the_copy)
    thread.join(10)
    assert not thread.is_alive()
    assert failed and "took longer than 3 s" in str(failed[0])
    stalling.close()


def test_a_multiprocessing_fork_child_compiles_after_this_process_has_compiled():
    output_format_from(regex="[a-z]+ parent")
    process = multiprocessing.get_context("fork").Process(target=compile_a_regex)
    process.start()
    process.join(15)
    if process.is_alive():
        process.kill()
        process.join()
        raise AssertionError("the fork child did not finish within 15 s")
    assert process.exitcode == 0
