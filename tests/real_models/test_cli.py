"""The ``specem`` command as a user runs it: real processes, real files, clean errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specem_local.models.demo_models import DEMO_MODELS, assemble_demo, demo_path, is_verified
from tests.conftest import ROOT

SPECEM = [sys.executable, "-m", "specem_local"]


def specem(*args: str, stdin: str | None = None, env: dict[str, str] | None = None, cwd: Path = ROOT):
    result = subprocess.run(
        [*SPECEM, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=600,
    )
    return result


def assert_clean_error(result, *fragments: str) -> None:
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("specem: error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[-1]


def one_model_config(tmp_path: Path, model_path: Path) -> Path:
    config = tmp_path / "models.toml"
    config.write_text(f'[[models]]\nname = "m"\npath = "{model_path}"\n')
    return config


def test_models_list_shows_the_demo_trio_ready():
    result = specem("models", "list")
    assert result.returncode == 0, result.stderr
    for name in ("qwen2.5-coder-0.5b", "gemma-3-270m", "smollm2-135m"):
        line = next(line for line in result.stdout.splitlines() if line.startswith(name))
        assert " ready " in line
    assert "Q4_K_M" in result.stdout and "262144" in result.stdout and "no (plain prompt)" in result.stdout
    data = json.loads(specem("models", "list", "--json").stdout)
    assert [m["status"] for m in data["models"]] == ["ready"] * 3
    assert data["models"][2]["architecture"] == "llama" and data["models"][2]["chat_template"] is True


def test_models_verify():
    result = specem("models", "verify")
    assert result.returncode == 0 and result.stdout.count(": ready") == 3


def test_run_streams_an_answer_with_authors():
    result = specem("run", "--authors", "--greedy", "--max-tokens", "20", "What is 2 + 2?")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("«")  # piped: authors as markers, not colours
    assert "segments" in result.stdout and "tok/s" in result.stdout
    assert "\x1b[" not in result.stdout


def test_run_json_reads_prompt_from_stdin():
    result = specem("run", "--json", "--greedy", "--max-tokens", "12", "-", stdin="Name a colour.")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [events[0]["type"], events[1]["type"], events[-1]["type"]] == ["start", "round", "final"]
    assert events[-1]["text"] == "".join(e["text"] for e in events[1:-1])
    assert {"weights", "candidates", "draft_seconds", "verify_seconds", "ranked_first_by"} <= set(events[1])
    assert set(events[0]["weights"]) == set(events[0]["models"])
    # the demo trio starts from its built-in calibration, so with model exit only Qwen drafts
    assert events[0]["weights_from"] == "built-in" and events[0]["drafters"] == ["qwen2.5-coder-0.5b"]
    assert events[-1]["drafters_per_round"] == 1.0


def test_not_a_gguf_file(tmp_path):
    bogus = tmp_path / "model.gguf"
    bogus.write_text("this is not a model")
    assert_clean_error(specem("run", "--config", str(one_model_config(tmp_path, bogus)), "hi"), "not a GGUF file")
    listing = specem("models", "list", "--config", str(one_model_config(tmp_path, bogus)))
    assert listing.returncode == 0 and "corrupt" in listing.stdout


def test_truncated_gguf_never_reaches_llama_cpp(tmp_path):
    whole = demo_path(DEMO_MODELS["smollm2-135m"]).read_bytes()
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(whole[: len(whole) // 2])
    result = specem("run", "--config", str(one_model_config(tmp_path, truncated)), "hi")
    assert_clean_error(result, "truncated GGUF")  # a clean error, not a segfault (rc -11)


def test_missing_file_says_where_it_looked(tmp_path):
    result = specem("run", "--config", str(one_model_config(tmp_path, tmp_path / "nope.gguf")), "hi")
    assert_clean_error(result, str(tmp_path / "nope.gguf"), "fix the path or download")


def test_invalid_toml_names_file_and_line(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text("[ensemble]\nseed = 1\ntemperature = = 2\n")
    assert_clean_error(specem("models", "list", "--config", str(config)), str(config), "line 3")


def test_unknown_key_suggests_near_match(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text('[ensemble]\nsegment_token = 4\n[[models]]\nname="a"\ndemo="smollm2-135m"\n')
    assert_clean_error(specem("run", "--config", str(config), "hi"), "did you mean 'segment_tokens'?")


def test_config_from_environment_and_current_directory(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text('[[models]]\nname = "only-smol"\ndemo = "smollm2-135m"\n')
    assert "only-smol" in specem("models", "list", env={"SPECEM_CONFIG": str(config)}).stdout
    assert "only-smol" in specem("models", "list", cwd=tmp_path).stdout


def test_empty_prompt(tmp_path):
    assert_clean_error(specem("run", "-", stdin="  \n"), "prompt is empty")


def test_one_model_is_labelled_plain_generation(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text('[[models]]\nname = "smol"\ndemo = "smollm2-135m"\n')
    result = specem("run", "--config", str(config), "--max-tokens", "8", "Hello")
    assert result.returncode == 0 and "plain generation" in result.stderr


def test_hf_model_offline_and_not_cached(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text('[[models]]\nname = "remote"\nhf = "nobody/nothing-GGUF"\nfile = "x.gguf"\n')
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    assert_clean_error(specem("models", "pull", "--config", str(config), env=env), "HF_HUB_OFFLINE")
    listing = specem("models", "list", "--config", str(config), env=env)
    assert "missing" in listing.stdout and "specem models pull" in listing.stderr


def test_partial_demo_file_is_rebuilt_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEM_CACHE_DIR", str(tmp_path))
    demo = DEMO_MODELS["smollm2-135m"]
    target = demo_path(demo)
    target.parent.mkdir(parents=True)
    target.write_bytes(b"GGUF" + b"\0" * 1000)  # an interrupted assembly
    assert assemble_demo(demo) == target
    assert target.stat().st_size == demo.size and is_verified(target, demo.sha256)


def test_model_too_large_for_free_memory_warns_with_numbers(monkeypatch):
    import specem_local.engine.loading as loading
    from specem_local.engine import Ensemble
    from tests.conftest import demo_config

    monkeypatch.setattr(loading, "available_memory_bytes", lambda: 50 * 2**20)
    with (
        pytest.warns(UserWarning, match=r"need at least 0\.09 GiB .* only 0\.05 GiB of memory is available"),
        Ensemble.from_config(demo_config("smollm2-135m")) as ensemble,
    ):
        assert ensemble.warnings


def test_undecodable_prompt_bytes_become_replacement_characters_before_loading(tmp_path):
    missing = one_model_config(tmp_path, tmp_path / "nope.gguf")
    for args, stdin in (([b"\xff"], None), (["-"], b"\xff\xfe bad")):
        result = subprocess.run(
            [*SPECEM, "run", "--config", str(missing), *args], input=stdin, capture_output=True, cwd=ROOT, timeout=60
        )
        errors = result.stderr.decode()
        assert result.returncode == 1 and "Traceback" not in errors
        assert "the prompt is not valid UTF-8" in errors and "is no such file" in errors  # read before any loading
    answered = subprocess.run(
        [*SPECEM, "run", "--max-tokens", "8", "--greedy", "-"], input=b"\xff What is 2 + 2?", capture_output=True
    )
    assert answered.returncode == 0 and answered.stdout.strip(), answered.stderr.decode()


@pytest.mark.parametrize("presses", [1, 2], ids=["once", "twice"])
def test_ctrl_c_during_an_answer_stops_it_cleanly(presses):
    """Ctrl-C stops the answer at once; a second Ctrl-C, pressed while it stops (an impatient
    user), changes nothing: the same exit, still no traceback."""
    import signal
    import time

    # A shell that starts the tests in the background makes its children ignore SIGINT; the
    # command a user runs at a terminal does not, so restore the default before specem starts.
    as_at_a_terminal = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.executable, [sys.executable, '-m', 'specem_local', *sys.argv[1:]])"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", as_at_a_terminal, "run", "--max-tokens", "400", "Write a very long story about it."],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert ready(process.stdout, 120)  # the first segment has arrived: the answer is under way
    assert process.stdout.read(1)
    for _ in range(presses):
        process.send_signal(signal.SIGINT)
        time.sleep(0.05)
    _, errors = process.communicate(timeout=120)
    assert process.returncode == 130, errors.decode()
    assert "[stopped]" in errors.decode() and "Traceback" not in errors.decode()


def ready(stream, seconds: float) -> bool:
    """Whether ``stream`` has something to read within ``seconds`` (a read never waits for ever)."""
    import select

    return bool(select.select([stream], [], [], seconds)[0])
