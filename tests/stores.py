"""Other tools' model stores, built in a temporary home for tests: Ollama's manifests and
blobs, an LM Studio models folder, llama.cpp's old cache (no network, no Ollama needed)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

OLLAMA_MODEL = "application/vnd.ollama.image.model"


def ollama_model(
    root: Path, name: str, gguf: Path | None, *, layer: str = OLLAMA_MODEL, old_blob: bool = False
) -> Path:
    """Add a model to an Ollama store at ``root`` as ``ollama pull`` leaves it: a manifest under
    ``manifests/<host>/<namespace>/<model>/<tag>`` and the GGUF as ``blobs/sha256-<hex>`` (a link
    to ``gguf``; ``sha256:<hex>`` for older stores). ``gguf=None`` leaves the blob out."""
    path, _, tag = name.partition(":")
    parts = path.split("/")
    host = parts[0] if len(parts) == 3 else "registry.ollama.ai"
    namespace = parts[-2] if len(parts) >= 2 else "library"
    digest = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
    layers = [
        {"mediaType": layer, "digest": digest, "size": 1},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 1},
    ]
    manifest = root / "manifests" / host / namespace / parts[-1] / (tag or "latest")
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    if gguf is not None:
        os.symlink(gguf, blobs / (digest if old_blob else digest.replace(":", "-")))
    return manifest


def lmstudio_model(models: Path, key: str, gguf: Path) -> Path:
    """``publisher/repo/file.gguf`` in an LM Studio models folder (a link to ``gguf``)."""
    target = models / key
    target.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(gguf, target)
    return target
