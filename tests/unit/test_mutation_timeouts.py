"""A mutant whose tests only hang is a timeout, reported apart, never a kill (issue 53): under
mutmut (``MUTANT_UNDER_TEST`` set), a test stopped by pytest-timeout ends the run with mutmut's
timeout code, and ``scripts/mutation_score.py`` counts timeouts apart from kills."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

HANGS = "import time\n\ndef test_hangs():\n    time.sleep(30)\n"


def run_hanging_test(tmp_path, **env: str) -> int:
    (tmp_path / "test_hangs.py").write_text(HANGS)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider", "--timeout", "1"]
    environment = {k: v for k, v in os.environ.items() if k != "MUTANT_UNDER_TEST"} | env
    return subprocess.run(
        [*command, str(tmp_path)], cwd=ROOT, env=environment, capture_output=True, timeout=60
    ).returncode


def test_a_hung_test_under_mutmut_exits_with_mutmuts_timeout_code(tmp_path):
    assert run_hanging_test(tmp_path, MUTANT_UNDER_TEST="specem_local.x.y__mutmut_1") == 36
    assert run_hanging_test(tmp_path) == 1  # outside mutation testing: an ordinary failure


def test_timeouts_are_counted_apart_from_kills(tmp_path):
    results = tmp_path / "results.txt"
    results.write_text(
        "specem_local.engine.vote.x__mutmut_1: killed\nspecem_local.engine.vote.x__mutmut_2: timeout\n"
        "specem_local.engine.vote.x__mutmut_3: survived\nspecem_local.engine.vote.x__mutmut_4: killed\n"
    )
    report = tmp_path / "report.txt"
    scored = subprocess.run(
        [sys.executable, "scripts/mutation_score.py", "engine/vote.py", str(results), str(tmp_path / "none"),
         "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert (
        "4 mutants, 2 killed, 1 timed out (not kills), 1 survived" in scored.stdout and "50.0% killed" in scored.stdout
    )
    assert "timed out: specem_local.engine.vote.x__mutmut_2" in report.read_text()
