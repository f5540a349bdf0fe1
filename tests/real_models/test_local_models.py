"""Ensembling the models a user already has: a (fake) Ollama store and LM Studio folder whose
files are the real demo GGUFs, found by ``specem models scan``, added with ``specem models
add`` and answering in ``specem run``."""

from __future__ import annotations

import json

from specem_local.dirs import cache_dir
from specem_local.models.demo_models import DEMO_MODELS, demo_path
from tests.conftest import write_gguf
from tests.real_models.test_cli import assert_clean_error, specem
from tests.stores import lmstudio_model, ollama_model

MY_TOML = """# my models (a comment that must survive)
[ensemble]
max_tokens = 24   # short answers

[[models]]
name = "gemma"
demo = "gemma-3-270m"
"""


def test_scan_add_and_run_with_models_from_ollama_and_lm_studio(tmp_path):
    home = tmp_path / "home"
    ollama_model(home / ".ollama" / "models", "qwen2.5-coder:0.5b", demo_path(DEMO_MODELS["qwen2.5-coder-0.5b"]))
    lmstudio = home / ".lmstudio" / "models"
    lmstudio_model(
        lmstudio,
        "bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_1.gguf",
        demo_path(DEMO_MODELS["smollm2-135m"]),
    )
    env = {"HOME": str(home), "OLLAMA_MODELS": "", "SPECEM_LMSTUDIO_MODELS": "", "SPECEM_CACHE_DIR": str(cache_dir())}

    scanned = specem("models", "scan", "--json", env=env)
    assert scanned.returncode == 0, scanned.stderr
    rows = {row["source"]: row for row in json.loads(scanned.stdout)["models"]}
    qwen = rows["ollama:qwen2.5-coder:0.5b"]
    assert qwen["architecture"] == "qwen2" and qwen["chat_template"] and qwen["path"].startswith(str(home / ".ollama"))
    assert rows["lmstudio:bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_1.gguf"]["vocab_size"] == 49152

    config = tmp_path / "models.toml"
    config.write_text(MY_TOML)
    for name, source in (("qwen", "ollama:qwen2.5-coder:0.5b"), ("smol", "lmstudio:SmolLM2")):
        added = specem("models", "add", name, source, "--config", str(config), env=env)
        assert added.returncode == 0 and f"updated {config}" in added.stdout, added.stderr
    assert config.read_text().startswith(MY_TOML)
    assert_clean_error(
        specem("models", "add", "qwen", "lmstudio:SmolLM2", "--config", str(config), env=env),
        "already has a model named 'qwen'",
    )

    result = specem("run", "--config", str(config), "--json", "--greedy", "What is 2 + 3?", env=env)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[0]["models"] == ["gemma", "qwen", "smol"] and events[-1]["text"]
    assert "specem: note: qwen has 2.4x the parameters of gemma: ensembles gain most" in result.stderr
    listing = specem("models", "list", "--config", str(config), env=env)
    assert "ollama:qwen2.5-coder:0.5b" in listing.stdout and "lmstudio:SmolLM2" in listing.stdout


def test_an_ollama_name_that_is_not_there_is_a_one_line_error(tmp_path):
    home = tmp_path / "home"
    ollama_model(home / ".ollama" / "models", "qwen2.5-coder:0.5b", demo_path(DEMO_MODELS["qwen2.5-coder-0.5b"]))
    config = tmp_path / "models.toml"
    config.write_text('[[models]]\nname = "q"\nollama = "qwen2.5-coder:1.5b"\n')
    result = specem("run", "--config", str(config), "Hi", env={"HOME": str(home), "OLLAMA_MODELS": ""})
    assert_clean_error(result, "no Ollama model 'qwen2.5-coder:1.5b'", "did you mean 'qwen2.5-coder:0.5b'")


def test_ollama_blobs_without_a_template_or_that_llama_cpp_cannot_load(tmp_path):
    home = tmp_path / "home"
    store = home / ".ollama" / "models"
    ollama_model(store, "gemma3:270m", demo_path(DEMO_MODELS["gemma-3-270m"]))  # its GGUF has no chat template
    ollama_model(store, "smollm2:135m", demo_path(DEMO_MODELS["smollm2-135m"]))
    config = tmp_path / "models.toml"
    config.write_text(
        '[[models]]\nname = "g"\nollama = "gemma3:270m"\n[[models]]\nname = "s"\nollama = "smollm2:135m"\n'
    )
    env = {"HOME": str(home), "OLLAMA_MODELS": ""}
    result = specem("run", "--config", str(config), "--max-tokens", "8", "Hi", env=env)
    assert result.returncode == 0, result.stderr
    assert "g: this Ollama model's GGUF has no chat template of its own" in result.stderr
    engine_only = write_gguf(tmp_path / "engine.gguf", {"general.architecture": "ollama-engine-only"}, [("w", (8,), 0)])
    ollama_model(store, "newer:1b", engine_only)
    config.write_text('[[models]]\nname = "n"\nollama = "newer:1b"\n')
    result = specem("run", "--config", str(config), "Hi", env=env)
    assert_clean_error(result, "llama.cpp could not load", "made for Ollama's own engine", "hf = ..., file = ...")
