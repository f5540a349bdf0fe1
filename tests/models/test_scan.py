"""``specem models scan`` and ``specem models add``, over stores built in a temporary home."""

from __future__ import annotations

import json
from pathlib import Path

import huggingface_hub.constants
import pytest
from huggingface_hub import try_to_load_from_cache

from specem_local.commands import cli
from specem_local.errors import SpecemError
from specem_local.models.config import load_config
from specem_local.models.models_file import add_model, file_to_edit, parse_source
from specem_local.models.scan import scan
from tests.conftest import ROOT, write_gguf
from tests.models.test_local_stores import gguf, home
from tests.stores import lmstudio_model, ollama_model

__all__ = ["gguf", "home"]  # fixtures

COMMIT = "a" * 40
USER_TOML = """# my ensemble: two models I like
[ensemble]
segment_tokens = 12   # shorter segments

# the first one
[[models]]
name = "mine"
path = "/models/mine.gguf"   # keep this comment
"""


def hf_cache(root: Path, repo: str, file: str, gguf: Path) -> Path:
    """A file in a Hugging Face cache, laid out as huggingface-hub lays it out: the content
    under ``blobs/``, linked from ``snapshots/<commit>/``, and ``refs/main`` naming the commit."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "blobs").mkdir(parents=True)
    blob = folder / "blobs" / ("b" * 64)
    blob.write_bytes(gguf.read_bytes())
    snapshot = folder / "snapshots" / COMMIT / file
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(Path("../../blobs") / blob.name)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def stores(home, gguf, tmp_path, monkeypatch):
    """One model in each place scan looks."""
    monkeypatch.chdir(tmp_path)  # no ./models.toml here: a models add edits the user's, never the checkout's
    monkeypatch.delenv("SPECEM_CONFIG", raising=False)
    ollama_model(home / ".ollama" / "models", "llama3.2:1b", gguf)
    ollama_model(home / ".ollama" / "models", "big-cloud:cloud", None, layer="application/vnd.ollama.image.params")
    lmstudio_model(home / ".lmstudio" / "models", "someone/Qwen-GGUF/qwen-q4_k_m.gguf", gguf)
    hub = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    hf_cache(hub, "someone/Tiny-GGUF", "tiny-Q8_0.gguf", gguf)
    (home / ".cache" / "llama.cpp").mkdir(parents=True)
    (home / ".cache" / "llama.cpp" / "someone_Old-GGUF_old.gguf").symlink_to(gguf)
    (home / "models").mkdir()
    write_gguf(home / "models" / "split-00001-of-00002.gguf", {"general.architecture": "llama"}, [("a", (8,), 0)])
    write_gguf(home / "models" / "split-00002-of-00002.gguf", {"general.architecture": "llama"}, [("b", (8,), 0)])
    return home


def test_the_cache_built_here_is_the_one_huggingface_hub_reads(stores):
    found = try_to_load_from_cache(repo_id="someone/Tiny-GGUF", filename="tiny-Q8_0.gguf")
    assert isinstance(found, str) and found.endswith(f"snapshots/{COMMIT}/tiny-Q8_0.gguf")


def test_scan_finds_every_store_and_reads_headers_only(stores, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    write_gguf(extra / "extra.gguf", {"general.architecture": "qwen2"}, [])
    found = {m.source_text: m for m in scan([extra])}
    assert set(found) == {
        "ollama:llama3.2:1b",
        "ollama:big-cloud:cloud",
        "lmstudio:someone/Qwen-GGUF/qwen-q4_k_m.gguf",
        "hf:someone/Tiny-GGUF/tiny-Q8_0.gguf",
        f"path:{stores / '.cache/llama.cpp/someone_Old-GGUF_old.gguf'}",
        f"path:{stores / 'models/split-00001-of-00002.gguf'}",
        f"path:{extra / 'extra.gguf'}",
    }
    assert found["ollama:llama3.2:1b"].suggested_name == "llama3.2-1b"
    assert (
        found["ollama:big-cloud:cloud"].path is None and "no local weights" in found["ollama:big-cloud:cloud"].problem
    )
    assert found["hf:someone/Tiny-GGUF/tiny-Q8_0.gguf"].entry == {"hf": "someone/Tiny-GGUF", "file": "tiny-Q8_0.gguf"}
    assert found["hf:someone/Tiny-GGUF/tiny-Q8_0.gguf"].origin == "hf"  # the FROM column of models scan
    split = found[f"path:{stores / 'models/split-00001-of-00002.gguf'}"]
    assert split.suggested_name == "split" and split.parameters == 16  # both parts counted
    assert found[f"path:{extra / 'extra.gguf'}"].header.architecture == "qwen2"


def test_models_scan_command_json(stores, capsys):
    assert cli.main(["models", "scan", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {row["source"]: row for row in report["models"]}
    assert rows["ollama:llama3.2:1b"]["architecture"] == "llama" and rows["ollama:llama3.2:1b"]["fits"] in (True, None)
    assert rows["ollama:big-cloud:cloud"]["fits"] is None and rows["ollama:big-cloud:cloud"]["problem"]


def test_add_keeps_the_comments_and_refuses_duplicates(tmp_path, gguf):
    config = tmp_path / "models.toml"
    config.write_text(USER_TOML)
    assert add_model(config, "llama", {"ollama": "llama3.2:1b"}) is False
    text = config.read_text()
    assert text.startswith(USER_TOML) and text.endswith('name = "llama"\nollama = "llama3.2:1b"\n')
    assert [m.name for m in load_config(config).models] == ["mine", "llama"]
    with pytest.raises(SpecemError, match="already has a model named 'llama'; pick another name"):
        add_model(config, "llama", {"ollama": "other:1b"})
    with pytest.raises(SpecemError, match="already has this model, as 'llama'"):
        add_model(config, "again", {"ollama": "llama3.2:1b"})
    with pytest.raises(SpecemError, match="give exactly one source"):
        add_model(config, "bad", {"ollama": "x", "path": "y"})
    assert config.read_text() == text  # nothing written by a refused add


def test_add_creates_the_user_file_from_the_built_in_one(stores, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPECEM_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    target = file_to_edit(None)
    assert target == tmp_path / "config" / "specem-local" / "models.toml"
    assert cli.main(["models", "add", "llama", "ollama:llama3.2:1b"]) == 0
    assert f"created {target}" in capsys.readouterr().out
    assert [m.name for m in load_config(target).models][-1] == "llama"
    assert (ROOT / "specem_local/data/models.toml").read_text().count(
        "[[models]]"
    ) == 3  # the package copy is untouched
    monkeypatch.chdir(ROOT)  # ./models.toml there is the package's own file: never edited
    assert file_to_edit(None) == target


def test_sources_on_the_command_line(stores, home, tmp_path, gguf):
    ollama_model(home / ".ollama" / "models", "hf.co/someone/tiny:Q4_K_M", gguf)
    assert parse_source("ollama:hf.co/someone/tiny:Q4_K_M") == {"ollama": "hf.co/someone/tiny:Q4_K_M"}
    assert parse_source("lmstudio:qwen") == {"lmstudio": "qwen"}
    assert parse_source("hf:someone/Tiny-GGUF/sub/tiny.gguf") == {"hf": "someone/Tiny-GGUF", "file": "sub/tiny.gguf"}
    assert parse_source(str(gguf)) == {"path": str(gguf)} == parse_source(f"path:{gguf}")
    for bad, message in (
        ("hf:someone/Tiny-GGUF", "hf:OWNER/REPO/FILE.gguf"),
        ("ollama:", "names no model"),
        ("olama:llama3.2", "is not a source"),
        (str(tmp_path / "missing.gguf"), "no file or folder at"),
    ):
        with pytest.raises(SpecemError, match=message):
            parse_source(bad)


def test_an_hf_entry_resolves_from_the_cache_offline(stores, gguf, tmp_path, monkeypatch):
    from specem_local.models.config import parse_config
    from specem_local.models.sources import source_for

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    entry = '[[models]]\nname = "t"\nhf = "someone/Tiny-GGUF"\nfile = "{}"\n'
    config = parse_config(entry.format("tiny-Q8_0.gguf"), "m.toml", tmp_path)
    located = source_for(config.models[0], config).locate()
    assert located.read_bytes() == gguf.read_bytes() and f"snapshots/{COMMIT}" in str(located)
    config = parse_config(entry.format("other.gguf"), "m.toml", tmp_path)
    with pytest.raises(SpecemError, match="is not in the Hugging Face cache; run: specem models pull"):
        source_for(config.models[0], config).locate()


def test_add_refuses_an_ollama_or_lm_studio_model_this_disk_does_not_have(stores, tmp_path, monkeypatch, capsys):
    """Issue 36: ``models add x ollama:<typo>`` was accepted, and every later run failed."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert cli.main(["models", "add", "typo", "ollama:llama3.2:1bb"]) == 1
    said = capsys.readouterr().err
    assert "no Ollama model 'llama3.2:1bb'" in said and "did you mean 'llama3.2:1b'?" in said and "(not added)" in said
    assert cli.main(["models", "add", "gone", "lmstudio:nobody/nothing/none.gguf"]) == 1
    assert "no LM Studio model matches" in capsys.readouterr().err
    assert not (tmp_path / "config" / "specem-local" / "models.toml").exists()  # nothing written
    assert cli.main(["models", "add", "llama", "ollama:llama3.2:1b"]) == 0  # and what is there is added
