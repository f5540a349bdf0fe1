"""What a worker's death is said as (issue 40's promises, issue 44's tests): ggml's source path
dropped from its last words, and ggml's backtrace off unless SPECEM_BACKTRACE=1."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from specem_local.backend.remote import last_words


def test_a_dead_workers_last_words_drop_ggmls_source_path():
    log = "loading...\n/src/ggml/ggml-rpc.cpp:587: GGML_ASSERT(status) failed\n\n"
    assert last_words(log) == "GGML_ASSERT(status) failed"
    assert last_words("ggml.c:12: x\nplain words at the end") == "plain words at the end"
    assert last_words("") == "" and len(last_words("x" * 1000)) == 200


@pytest.mark.parametrize(("value", "no_backtrace"), [(None, "1"), ("1", None), ("yes", None), ("0", "1")])
def test_ggmls_backtrace_is_off_unless_specem_backtrace_asks_for_it(value, no_backtrace):
    env = {k: v for k, v in os.environ.items() if k not in ("SPECEM_BACKTRACE", "GGML_NO_BACKTRACE")}
    if value is not None:
        env["SPECEM_BACKTRACE"] = value
    probe = "import os, specem_local.backend.library; print(os.environ.get('GGML_NO_BACKTRACE'))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(no_backtrace)
