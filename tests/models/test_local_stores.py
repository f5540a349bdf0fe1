"""Finding GGUFs where other tools keep them: Ollama, LM Studio, llama.cpp's old cache and
folders, in stores built in a temporary home."""

from __future__ import annotations

import pytest

from specem_local.errors import SpecemError
from specem_local.models.config import parse_config
from specem_local.models.local_stores import OllamaName, gguf_files, lmstudio_file, ollama_blob, one_gguf
from specem_local.models.sources import source_for
from tests.conftest import write_gguf
from tests.stores import lmstudio_model, ollama_model


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty home: none of the tools' variables set."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for variable in ("OLLAMA_MODELS", "SPECEM_LMSTUDIO_MODELS", "LLAMA_CACHE", "XDG_CACHE_HOME", "HF_HOME"):
        monkeypatch.delenv(variable, raising=False)
    return home


@pytest.fixture
def gguf(tmp_path):
    return write_gguf(tmp_path / "tiny.gguf", {"general.architecture": "llama"}, [("w", (4, 4), 0)])


def test_ollama_names_default_host_namespace_and_tag():
    assert OllamaName.parse("llama3.2") == OllamaName("registry.ollama.ai", "library", "llama3.2", "latest")
    assert OllamaName.parse("llama3.2:1b").tag == "1b" and str(OllamaName.parse("llama3.2:1b")) == "llama3.2:1b"
    assert OllamaName.parse("someone/tiny:q4") == OllamaName("registry.ollama.ai", "someone", "tiny", "q4")
    hub = OllamaName.parse("hf.co/bartowski/Qwen2.5-0.5B-GGUF:Q4_K_M")
    assert hub == OllamaName("hf.co", "bartowski", "Qwen2.5-0.5B-GGUF", "Q4_K_M")
    assert str(hub) == "hf.co/bartowski/Qwen2.5-0.5B-GGUF:Q4_K_M"
    for bad in ("", "a/b/c/d", "../x", "x:../y", "a//b"):
        with pytest.raises(SpecemError, match="not an Ollama model name"):
            OllamaName.parse(bad)


def test_an_ollama_model_is_its_blob_where_it_lies(home, gguf):
    store = home / ".ollama" / "models"
    ollama_model(store, "llama3.2:1b", gguf)
    ollama_model(store, "hf.co/someone/tiny-GGUF:Q4_K_M", gguf)
    ollama_model(store, "old:latest", gguf, old_blob=True)
    assert ollama_blob("llama3.2:1b").resolve() == gguf.resolve()
    assert ollama_blob("llama3.2:1b").parent == store / "blobs"  # used in place, not copied
    assert ollama_blob("hf.co/someone/tiny-GGUF:Q4_K_M").resolve() == gguf.resolve()
    assert ollama_blob("old").name.startswith("sha256:")


def test_ollama_models_variable_moves_the_store(home, gguf, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    ollama_model(elsewhere, "tiny", gguf)
    with pytest.raises(SpecemError, match="ollama pull tiny"):
        ollama_blob("tiny")
    monkeypatch.setenv("OLLAMA_MODELS", str(elsewhere))
    assert ollama_blob("tiny:latest").resolve() == gguf.resolve()


def test_ollama_errors_say_what_was_looked_at(home, gguf, tmp_path):
    store = home / ".ollama" / "models"
    ollama_model(store, "llama3.2:1b", gguf)
    with pytest.raises(SpecemError, match=r"no Ollama model 'llama3.2:3b' \(looked in .*\.ollama/models.*did you mean"):
        ollama_blob("llama3.2:3b")
    ollama_model(store, "gone:1b", None)
    with pytest.raises(SpecemError, match=r"blob sha256:\w+ is missing from .*blobs; run: ollama pull gone:1b"):
        ollama_blob("gone:1b")
    ollama_model(store, "cloudy:cloud", None, layer="application/vnd.ollama.image.params")
    with pytest.raises(SpecemError, match="no local weights"):
        ollama_blob("cloudy:cloud")
    ollama_model(store, "engine:new", None, layer="application/vnd.ollama.image.tensor")
    with pytest.raises(SpecemError, match="separate tensors for Ollama's own engine"):
        ollama_blob("engine:new")
    not_gguf = tmp_path / "license.txt"
    not_gguf.write_text("Apache-2.0")
    ollama_model(store, "odd:1b", not_gguf)
    with pytest.raises(SpecemError, match="is not a GGUF file"):
        ollama_blob("odd:1b")
    (store / "manifests" / "registry.ollama.ai" / "library" / "llama3.2" / "1b").write_text("{not json")
    with pytest.raises(SpecemError, match="cannot read its manifest"):
        ollama_blob("llama3.2:1b")


def test_lm_studio_by_path_or_a_unique_part_of_it(home, gguf, tmp_path, monkeypatch):
    models = home / ".lmstudio" / "models"
    lmstudio_model(models, "lmstudio-community/Qwen-GGUF/qwen-q4_k_m.gguf", gguf)
    lmstudio_model(models, "lmstudio-community/Qwen-GGUF/qwen-q8_0.gguf", gguf)
    lmstudio_model(models, "bartowski/Llama-GGUF/llama-q4_k_m.gguf", gguf)
    assert lmstudio_file("bartowski/Llama-GGUF/llama-q4_k_m.gguf").name == "llama-q4_k_m.gguf"
    assert lmstudio_file("q8_0").name == "qwen-q8_0.gguf"
    with pytest.raises(SpecemError, match=r"'q4_k_m' matches 2 LM Studio models \(.*\); give more of the path"):
        lmstudio_file("q4_k_m")
    with pytest.raises(SpecemError, match=r"no LM Studio model matches 'mistral'.*SPECEM_LMSTUDIO_MODELS"):
        lmstudio_file("mistral")
    # a home pointer names another LM Studio home; the variable overrides everything
    pointed = tmp_path / "lms-home"
    lmstudio_model(pointed / "models", "someone/Gemma-GGUF/gemma.gguf", gguf)
    (home / ".lmstudio-home-pointer").write_text(str(pointed))
    assert lmstudio_file("gemma").name == "gemma.gguf"
    monkeypatch.setenv("SPECEM_LMSTUDIO_MODELS", str(pointed / "models"))
    with pytest.raises(SpecemError, match="no LM Studio model matches 'llama'"):
        lmstudio_file("llama")


def test_a_path_may_be_a_glob_or_folder_naming_one_gguf(tmp_path, gguf):
    folder = tmp_path / "models"
    folder.mkdir()
    for part in (1, 2, 3):
        write_gguf(folder / f"big-0000{part}-of-00003.gguf", {"general.architecture": "llama"}, [])
    (folder / "mmproj-big-f16.gguf").write_bytes(b"GGUF")
    assert gguf_files(folder) == [folder / "big-00001-of-00003.gguf"]  # a split GGUF is one model
    assert one_gguf("models", tmp_path) == folder / "big-00001-of-00003.gguf"
    assert one_gguf(str(tmp_path / "models/big-*.gguf"), tmp_path) == folder / "big-00001-of-00003.gguf"
    assert one_gguf("*.gguf", tmp_path) == gguf
    write_gguf(folder / "small.gguf", {"general.architecture": "llama"}, [])
    with pytest.raises(SpecemError, match=r"'models' matches 2 GGUF files \(.*big-00001.*small.gguf\); name one"):
        one_gguf("models", tmp_path)
    with pytest.raises(SpecemError, match="matches no GGUF file"):
        one_gguf("nothing-*.gguf", tmp_path)


def test_models_toml_entries_resolve_through_the_stores(home, gguf, tmp_path):
    ollama_model(home / ".ollama" / "models", "llama3.2:1b", gguf)
    lmstudio_model(home / ".lmstudio" / "models", "someone/Qwen-GGUF/qwen.gguf", gguf)
    cache = home / ".cache" / "llama.cpp"
    cache.mkdir(parents=True)
    (cache / "someone_Tiny-GGUF_tiny-q4.gguf").symlink_to(gguf)
    text = """
[[models]]
name = "a"
ollama = "llama3.2:1b"
[[models]]
name = "b"
lmstudio = "qwen"
[[models]]
name = "c"
hf = "someone/Tiny-GGUF"
file = "tiny-q4.gguf"
[[models]]
name = "d"
path = "*.gguf"
[[models]]
name = "e"
path = "nested/*.gguf"
"""
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "tiny.gguf").symlink_to(gguf)
    config = parse_config(text, "models.toml", tmp_path)
    sources = [source_for(spec, config) for spec in config.models]
    assert [s.describe() for s in sources] == [
        "ollama:llama3.2:1b",
        "lmstudio:qwen",
        "hf:someone/Tiny-GGUF/tiny-q4.gguf",
        "path:*.gguf",
        "path:nested/*.gguf",
    ]
    assert all(s.prepare().resolve() == gguf.resolve() for s in sources)
    with pytest.raises(SpecemError, match="give exactly one source"):
        parse_config('[[models]]\nname = "x"\nollama = "a"\nlmstudio = "b"\n', "models.toml", tmp_path)
    ambiguous = parse_config('[[models]]\nname = "x"\npath = "**/*.gguf"\n', "models.toml", tmp_path)
    with pytest.raises(
        SpecemError, match=r"model .x.: .* matches 4 GGUF files .* \(path = '\*\*/\*.gguf' in models.toml\)"
    ):
        source_for(ambiguous.models[0], ambiguous).locate()
    missing = parse_config('[[models]]\nname = "x"\nollama = "nope"\n', "models.toml", tmp_path)
    with pytest.raises(SpecemError, match=r"model 'x': no Ollama model 'nope:latest'.*\(specem does not download"):
        source_for(missing.models[0], missing).pull()
