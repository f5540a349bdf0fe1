"""The short soak (50 answers) of ``research/soak.py``, in a process of its own: the peak RSS of
the pytest process is set by whatever loaded before (a second trio), so growth measured there
reads ~0 whatever leaks. The 500-answer figures are in the README."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_fifty_answers_with_cancels_and_reloads_lose_nothing_and_do_not_grow(tmp_path):
    output = tmp_path / "soak.json"
    command = [sys.executable, "-m", "specem_research.soak", "--answers", "50", "--max-tokens", "12"]
    command += ["--reload", "25", "--seed", "1", "--data", str(tmp_path), "--output", str(output)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]  # first: a crash says why, not a missing file
    result = json.loads(output.read_text())
    assert result["lost"] == result["corrupt"] == result["record_errors"] == result["left_streaming"] == 0
    assert result["integrity"] == "ok" and result["finishes"].get("cancelled", 0) > 0
    assert len(result["rss_slope_bytes_per_answer"]) == 2  # a slope per block, each from 20 points
    assert result["rss_slope_max"] <= 128 * 1024, result["rss_slope_bytes_per_answer"]  # under 128 KiB an answer
    assert result["rss_growth"] <= 0.05, result["rss_by_block"]
    assert result["peak_rss_growth"] <= 0.05, result["peak_rss_by_block"]
