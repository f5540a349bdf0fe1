"""The hostile tester's repros (issue 17), with real models and real processes: no input may
abort the process, Ctrl-C stops at any moment, and every answer lands in the history."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specem_local.backend import LlamaModel
from specem_local.backend.ram import rss_bytes
from specem_local.models.demo_models import DEMO_MODELS, assemble_demo
from specem_research.faults import AT_A_TERMINAL
from tests.conftest import ROOT
from tests.real_models.test_cli import assert_clean_error, specem


def small_context(tmp_path: Path, n_ctx: int, twice: bool = False) -> Path:
    config = tmp_path / "models.toml"
    entry = '[[models]]\nname = "{}"\ndemo = "smollm2-135m"\nn_ctx = {}\n'
    config.write_text(entry.format("smol", n_ctx) + (entry.format("smol-again", n_ctx) if twice else ""))
    return config


def test_a_context_below_512_neither_aborts_nor_hides_why_it_stopped(tmp_path):
    config = small_context(tmp_path, 300)
    # The tester's repro: 350 words (381 tokens) in one prompt chunk larger than the batch that
    # llama.cpp capped at n_ctx = 300: GGML_ASSERT and SIGABRT (rc 134) before.
    repro = specem("run", "--config", str(config), "-", stdin=" ".join(["word"] * 350))
    assert repro.returncode == 0, repro.stderr
    assert repro.stdout.strip() or "without writing anything" in repro.stderr
    long_prompt = "Summarise this text. " + " ".join(["sentence"] * 800)
    assert_clean_error(specem("run", "--config", str(config), "-", stdin=long_prompt), "leaves no room to answer")
    short = specem("run", "--config", str(config), "--max-tokens", "1000", "--ignore-eos", "Tell me a story.")
    assert short.returncode == 0, short.stderr
    assert short.stdout.strip() and "[stopped: the context is full" in short.stderr


def test_the_same_gguf_under_two_names_is_warned_about(tmp_path):
    result = specem("run", "--config", str(small_context(tmp_path, 512, twice=True)), "--max-tokens", "8", "Hi")
    assert result.returncode == 0, result.stderr
    assert "smol and smol-again are the same file" in result.stderr


def test_ctrl_c_in_a_callback_from_llama_cpp_stops_the_load():
    path = assemble_demo(DEMO_MODELS["smollm2-135m"])

    def interrupted(fraction: float) -> None:
        if fraction > 0.2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        LlamaModel(path, n_ctx=512, n_seq_max=2, n_threads=2, progress=interrupted)
    LlamaModel(path, n_ctx=512, n_seq_max=2, n_threads=2).close()  # nothing left half-done


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the process's memory from /proc")
def test_ctrl_c_while_the_models_load_stops_with_130():
    process = subprocess.Popen(
        [sys.executable, "-c", AT_A_TERMINAL, "run", "--max-tokens", "300", "Write a long story."],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while (rss_bytes(process.pid) or 0) < 250 * 2**20 and time.monotonic() < deadline:  # weights coming in
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    output, errors = process.communicate(timeout=60)
    text = errors.decode()
    assert process.returncode == 130, text
    assert "Traceback" not in text and "Exception ignored" not in text and "[stopped]" in text
    assert output.strip() == b""  # stopped while loading: not one word of an answer


def test_specem_run_records_its_answers_and_specem_history_finds_them(tmp_path):
    env = {"SPECEM_DATA_DIR": str(tmp_path / "data")}
    answered = specem("run", "--max-tokens", "24", "--greedy", "What is the capital of France?", env=env)
    assert answered.returncode == 0, answered.stderr
    not_recorded = specem("run", "--no-log", "--max-tokens", "8", "Not recorded", env=env)
    assert not_recorded.returncode == 0 and not_recorded.stdout.strip(), not_recorded.stderr
    listed = json.loads(specem("history", "list", "--json", env=env).stdout)
    assert [(c["title"], c["origin"], c["messages"]) for c in listed] == [("What is the capital of France?", "run", 2)]
    chat_id = listed[0]["id"]
    found = json.loads(specem("history", "search", "capital", "france", "--json", env=env).stdout)
    assert found and found[0]["chat_id"] == chat_id
    shown = json.loads(specem("history", "show", chat_id, "--json", env=env).stdout)
    answer = shown["turns"][1]
    assert answer["content"] == answered.stdout.strip() and answer["final"]["finish_reason"] in ("eos", "length")
    assert len(answer["rounds"]) == answer["final"]["rounds"]
    target = tmp_path / "chat.md"
    exported = specem("history", "export", chat_id, "-o", str(target), env=env)
    assert exported.returncode == 0 and target.read_text().startswith("# What is the capital of France?")
    assert (target.stat().st_mode & 0o777) == 0o600
    assert_clean_error(specem("history", "show", "no-such-chat", env=env), "no chat 'no-such-chat'")
    assert specem("history", "delete", chat_id, env=env).returncode == 0
    assert json.loads(specem("history", "list", "--json", env=env).stdout) == []
