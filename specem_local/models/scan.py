"""Every GGUF on this machine that other tools downloaded, with what its header says, for
``specem models scan``: Ollama's store, LM Studio's folder, the Hugging Face cache,
llama.cpp's old cache, ``~/models`` and folders the user names. Headers only: no weights are
loaded, nothing is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specem_local.errors import SpecemError
from specem_local.models.gguf import GGUFHeader, read_header
from specem_local.models.local_stores import (
    gguf_files,
    is_model_file,
    llama_cpp_cache_dirs,
    lmstudio_models,
    model_layer_blob,
    ollama_names,
    ollama_roots,
    split_parts,
)


@dataclass(frozen=True)
class FoundModel:
    """One model found on disk, and the models.toml keys that name it."""

    origin: str  # "ollama", "lmstudio", "hf", "llama.cpp" or "folder"
    entry: dict[str, str]  # e.g. {"ollama": "llama3.2:1b"}
    path: Path | None  # None when the tool keeps no GGUF of it (``problem`` says why)
    header: GGUFHeader | None = None
    problem: str | None = None
    size: int = 0  # bytes, every part of a split GGUF
    parameters: int = 0

    @property
    def suggested_name(self) -> str:
        """A short models.toml name: ``llama3.2-1b`` for ``ollama = "llama3.2:1b"``."""
        if self.origin == "ollama":
            text = self.entry["ollama"].rsplit("/", 1)[-1].replace(":latest", "").replace(":", "-")
        else:
            text = Path(self.entry.get("file") or self.entry.get("lmstudio") or self.entry["path"]).name
            text = re.sub(r"(-\d{5}-of-\d{5})?\.gguf$", "", text, flags=re.IGNORECASE)
        return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-") or "model"

    @property
    def source_text(self) -> str:
        """The source as ``specem models add NAME SOURCE`` takes it."""
        if "hf" in self.entry:
            return f"hf:{self.entry['hf']}/{self.entry['file']}"
        key, value = next(iter(self.entry.items()))
        return f"{key}:{value}"


def examine(origin: str, entry: dict[str, str], path: Path) -> FoundModel:
    """Read a found file's header (every part of a split GGUF); a bad file is kept, with why."""
    parts = split_parts(path)
    try:
        headers = [read_header(part) for part in parts]
    except SpecemError as error:
        return FoundModel(origin, entry, path, problem=str(error), size=path.stat().st_size)
    size = sum(h.file_size for h in headers)
    return FoundModel(origin, entry, path, headers[0], None, size, sum(h.parameter_count for h in headers))


def scan(folders: list[Path] | None = None) -> list[FoundModel]:
    """Every model in the known places and in ``folders``; a file found twice (a link, the
    same blob under two Ollama names) is listed under each name."""
    found = _ollama() + _lmstudio() + _huggingface()
    for folder in llama_cpp_cache_dirs():
        found += [examine("llama.cpp", {"path": str(p)}, p) for p in _files_in(folder, recursive=False)]
    for folder in [Path.home() / "models", *(folders or [])]:
        found += [examine("folder", {"path": str(p)}, p) for p in _files_in(folder.expanduser(), recursive=True)]
    return found


def _files_in(folder: Path, *, recursive: bool) -> list[Path]:
    return gguf_files(folder, recursive=recursive) if folder.is_dir() else []


def _ollama() -> list[FoundModel]:
    found = []
    for root in ollama_roots():
        for name in ollama_names(root):
            entry = {"ollama": str(name)}
            try:
                blob = model_layer_blob(root, name.manifest(root), str(name))
            except SpecemError as error:
                found.append(FoundModel("ollama", entry, None, problem=str(error)))
                continue
            found.append(examine("ollama", entry, blob))
    return found


def _lmstudio() -> list[FoundModel]:
    return [examine("lmstudio", {"lmstudio": key}, path) for key, path in lmstudio_models()]


def _huggingface() -> list[FoundModel]:
    """GGUF files in the Hugging Face cache, through huggingface-hub's own reader of it."""
    from huggingface_hub import constants, scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        cache = scan_cache_dir(constants.HF_HUB_CACHE)  # as the hub reads it now (its default is fixed at import)
    except (CacheNotFound, OSError, ValueError):  # none, unreadable, or a file where the folder would be
        return []
    found: dict[tuple[str, str], FoundModel] = {}
    for repo in cache.repos:
        if repo.repo_type != "model":
            continue
        for revision in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True):
            for cached in revision.files:
                relative = cached.file_path.relative_to(revision.snapshot_path).as_posix()
                if not is_model_file(cached.file_path):
                    continue
                key = (repo.repo_id, relative)
                if key not in found:
                    found[key] = examine("hf", {"hf": repo.repo_id, "file": relative}, cached.file_path)
    return list(found.values())
