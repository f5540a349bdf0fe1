"""Where models come from, on what a hostile read left on disk: an Ollama manifest of the wrong
shape, a GGUF that cannot be read, a Hugging Face cache that is a file, an ``hf`` repo id that is
none; each is that model's problem in one line, and the rest of the scan goes on."""

from __future__ import annotations

import json

import huggingface_hub.constants
import pytest

from specem_local.errors import SpecemError
from specem_local.models.config import parse_config
from specem_local.models.gguf import read_header
from specem_local.models.scan import scan
from specem_local.models.sources import source_for
from tests.models.test_local_stores import gguf, home
from tests.stores import ollama_model

__all__ = ["gguf", "home"]  # fixtures


@pytest.mark.parametrize("manifest", ['{"layers": null}', '{"layers": 5}', "[" * 100_000 + "]" * 100_000, "[1]"])
def test_an_ollama_manifest_of_the_wrong_shape_is_that_models_problem(home, gguf, manifest):
    root = home / ".ollama" / "models"
    ollama_model(root, "good:1b", gguf)
    ollama_model(root, "odd:1b", gguf).write_text(manifest)
    found = {m.source_text: m for m in scan()}
    assert found["ollama:good:1b"].path is not None
    assert "cannot read its manifest" in found["ollama:odd:1b"].problem and "\n" not in found["ollama:odd:1b"].problem


def test_a_gguf_that_cannot_be_read_is_one_line(tmp_path, monkeypatch, gguf):
    def refused(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(gguf), "open", refused)
    with pytest.raises(SpecemError, match=r"tiny.gguf: cannot read it \(Permission denied\)"):
        read_header(gguf)


def test_a_hugging_face_cache_that_is_a_file_finds_nothing_there(home, gguf, tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    hub.write_text("not a folder")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    ollama_model(home / ".ollama" / "models", "good:1b", gguf)
    assert [m.source_text for m in scan()] == ["ollama:good:1b"]


def test_an_hf_repo_id_that_is_none_is_one_line(home, tmp_path):
    config = parse_config('[[models]]\nname = "x"\nhf = "not a repo!"\nfile = "x.gguf"\n', "models.toml", tmp_path)
    with pytest.raises(SpecemError) as caught:
        source_for(config.models[0], config).locate()
    assert str(caught.value) == (
        "model 'x': hf = 'not a repo!' is not a Hugging Face repo id (owner/name: letters, digits, -, _ and .)"
    )
    with pytest.raises(SpecemError, match="is not a Hugging Face repo id"):
        source_for(config.models[0], config).pull()


def test_an_ollama_model_with_a_lora_adapter_is_refused_not_run_as_its_base(home, gguf):
    manifest = ollama_model(home / ".ollama" / "models", "tuned:1b", gguf)
    data = json.loads(manifest.read_text())
    data["layers"].append({"mediaType": "application/vnd.ollama.image.adapter", "digest": "sha256:" + "1" * 64})
    manifest.write_text(json.dumps(data))
    [found] = [m for m in scan() if m.source_text == "ollama:tuned:1b"]
    assert found.path is None and "LoRA adapter" in found.problem and "does not apply" in found.problem


def test_an_ollama_manifest_without_layers_is_a_model_with_no_weights_and_a_bad_one_says_why(home, gguf):
    root = home / ".ollama" / "models"
    ollama_model(root, "empty:1b", gguf).write_text("{}")
    ollama_model(root, "odd:1b", gguf).write_text('{"layers": 5}')
    found = {m.source_text: m.problem for m in scan()}
    assert "has no local weights" in found["ollama:empty:1b"]
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / "odd" / "1b"
    assert found["ollama:odd:1b"] == (
        f"Ollama model 'odd:1b': cannot read its manifest {manifest} ('int' object is not iterable)"
    )
