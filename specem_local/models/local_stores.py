"""GGUF files that other local tools already keep: Ollama's store, LM Studio's models folder,
llama.cpp's old download cache, and plain folders.

Everything here only reads. Ollama deletes blobs that no manifest references, so a file in its
store is used where it lies and never copied, moved or written. Each lookup that fails says
what it looked at and how to get the model.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from specem_local.errors import SpecemError

GGUF_MAGIC = b"GGUF"
OLLAMA_ENV = "OLLAMA_MODELS"  # Ollama's own variable for its store
LMSTUDIO_ENV = "SPECEM_LMSTUDIO_MODELS"  # LM Studio has none; this one points us elsewhere
LLAMA_CACHE_ENV = "LLAMA_CACHE"  # llama.cpp's own variable for its download cache
OLLAMA_HOST = "registry.ollama.ai"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_TENSOR_LAYER = "application/vnd.ollama.image.tensor"
OLLAMA_ADAPTER_LAYER = "application/vnd.ollama.image.adapter"  # a LoRA on the model (`ollama create` ADAPTER)
NAME_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a part of an Ollama model name
SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return file.read(4) == GGUF_MAGIC
    except OSError:
        return False


def _looked_in(roots: list[Path]) -> str:
    return ", ".join(str(root) for root in roots) or "nowhere"


# -- plain folders ---------------------------------------------------------------------------------
def split_parts(first: Path) -> list[Path]:
    """The files of a split GGUF, given its first part (``-00001-of-00003.gguf``); a plain
    file is its own only part."""
    match = SPLIT_PART.search(first.name)
    if not match:
        return [first]
    total = int(match.group(2))
    stem = first.name[: match.start()]
    return [first.with_name(f"{stem}-{n:05d}-of-{total:05d}.gguf") for n in range(1, total + 1)]


def is_model_file(path: Path) -> bool:
    """A ``.gguf`` that is a model: not a later part of a split GGUF (a split model is its first
    part) and not a vision projector (``mmproj``)."""
    name = path.name.lower()
    match = SPLIT_PART.search(name)
    return name.endswith(".gguf") and not name.startswith("mmproj") and not (match and int(match.group(1)) != 1)


def gguf_files(folder: Path, *, recursive: bool = True) -> list[Path]:
    """The models in a folder (``is_model_file``), sorted."""
    return sorted(p for p in folder.glob("**/*" if recursive else "*") if is_model_file(p) and p.is_file())


def one_gguf(pattern: str, base_dir: Path) -> Path:
    """A ``path`` that is a glob or a folder: the one GGUF it names, or an error listing what
    it matched."""
    expanded = Path(pattern).expanduser()
    if not expanded.is_absolute():
        expanded = base_dir / expanded
    if expanded.is_dir():
        matches = gguf_files(expanded)
    else:
        anchor = Path(expanded.anchor)
        found = anchor.glob(str(expanded.relative_to(anchor)))
        matches = sorted({p for p in found if is_model_file(p) and p.is_file()})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SpecemError(f"{pattern!r} matches no GGUF file (looked for {expanded})")
    shown = ", ".join(str(p) for p in matches[:6]) + (f" and {len(matches) - 6} more" if len(matches) > 6 else "")
    raise SpecemError(f"{pattern!r} matches {len(matches)} GGUF files ({shown}); name one of them")


# -- Ollama ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OllamaName:
    """A model name as ``ollama pull`` takes it: ``[host/][namespace/]model[:tag]``."""

    host: str
    namespace: str
    model: str
    tag: str

    @classmethod
    def parse(cls, name: str) -> OllamaName:
        path, _, tag = name.strip().partition(":")
        parts = path.split("/")
        if not 1 <= len(parts) <= 3 or not all(NAME_PART.match(p) for p in parts) or (tag and not NAME_PART.match(tag)):
            raise SpecemError(f"{name!r} is not an Ollama model name; write it as `ollama pull` takes it: llama3.2:1b")
        host = parts[0] if len(parts) == 3 else OLLAMA_HOST
        namespace = parts[-2] if len(parts) >= 2 else "library"
        return cls(host, namespace, parts[-1], tag or "latest")

    def __str__(self) -> str:
        prefix = "" if self.host == OLLAMA_HOST else f"{self.host}/"
        prefix += "" if (self.host, self.namespace) == (OLLAMA_HOST, "library") else f"{self.namespace}/"
        return f"{prefix}{self.model}:{self.tag}"

    def manifest(self, root: Path) -> Path:
        return root / "manifests" / self.host / self.namespace / self.model / self.tag


def ollama_roots() -> list[Path]:
    """Where Ollama's store may be: ``$OLLAMA_MODELS``, else ``~/.ollama/models`` and, on Linux,
    the system service's ``/usr/share/ollama/.ollama/models``."""
    override = os.environ.get(OLLAMA_ENV)
    if override:
        return [Path(override).expanduser()]
    roots = [Path.home() / ".ollama" / "models"]
    if sys.platform.startswith("linux"):
        roots.append(Path("/usr/share/ollama/.ollama/models"))
    return roots


def ollama_names(root: Path) -> list[OllamaName]:
    """Every model with a manifest in one store."""
    manifests = root / "manifests"
    names = []
    for manifest in manifests.glob("*/*/*/*"):
        if manifest.is_file():
            host, namespace, model, tag = manifest.relative_to(manifests).parts
            names.append(OllamaName(host, namespace, model, tag))
    return sorted(names, key=str)


def ollama_blob(name: str) -> Path:
    """The GGUF blob of an Ollama model, where it lies in Ollama's store."""
    wanted = OllamaName.parse(name)
    roots = ollama_roots()
    for root in roots:
        manifest = wanted.manifest(root)
        if manifest.is_file():
            return model_layer_blob(root, manifest, str(wanted))
    known = [str(n) for root in roots for n in ollama_names(root)]
    close = difflib.get_close_matches(str(wanted), known, n=1)
    hint = f"did you mean {close[0]!r}? Or run" if close else "run"
    raise SpecemError(f"no Ollama model {str(wanted)!r} (looked in {_looked_in(roots)}); {hint}: ollama pull {name}")


def model_layer_blob(root: Path, manifest: Path, name: str) -> Path:
    try:
        layers = json.loads(manifest.read_text("utf-8")).get("layers", [])
        types = [layer.get("mediaType") for layer in layers]
    except (OSError, ValueError, AttributeError, TypeError, RecursionError) as error:  # not a manifest's shape
        said = " ".join(str(error).split())[:120]
        raise SpecemError(f"Ollama model {name!r}: cannot read its manifest {manifest} ({said})") from None
    if OLLAMA_ADAPTER_LAYER in types:  # run without it, it would be the base model under the fine-tune's name
        raise SpecemError(
            f"Ollama model {name!r} adds a LoRA adapter to its base model ({manifest}), which specem does not "
            "apply; use a GGUF with the adapter merged (path = ...)"
        )
    if OLLAMA_MODEL_LAYER not in types:
        if OLLAMA_TENSOR_LAYER in types:
            raise SpecemError(
                f"Ollama model {name!r} is stored as separate tensors for Ollama's own engine ({manifest}), "
                "not as one GGUF llama.cpp can load; use a GGUF of it from the hub (hf = ..., file = ...)"
            )
        raise SpecemError(
            f"Ollama model {name!r} has no local weights ({manifest} names no model layer; a cloud model?); "
            "pick a model that runs locally"
        )
    digest = str(layers[types.index(OLLAMA_MODEL_LAYER)].get("digest", ""))
    blobs = root / "blobs"
    for blob in (blobs / digest.replace(":", "-"), blobs / digest):
        if blob.is_file():
            if not is_gguf(blob):
                raise SpecemError(
                    f"Ollama model {name!r}: its blob {blob} is not a GGUF file; "
                    "use a GGUF of this model from the hub (hf = ..., file = ...)"
                )
            return blob
    raise SpecemError(f"Ollama model {name!r}: blob {digest} is missing from {blobs}; run: ollama pull {name}")


# -- LM Studio --------------------------------------------------------------------------------------
def lmstudio_roots() -> list[Path]:
    """LM Studio's models folders: ``$SPECEM_LMSTUDIO_MODELS``, else the one under the home that
    ``~/.lmstudio-home-pointer`` names, ``~/.lmstudio/models`` and the older
    ``~/.cache/lm-studio/models``."""
    override = os.environ.get(LMSTUDIO_ENV)
    if override:
        return [Path(override).expanduser()]
    home = Path.home()
    roots = []
    try:
        pointed = (home / ".lmstudio-home-pointer").read_text("utf-8").strip()
        if pointed:
            roots.append(Path(pointed).expanduser() / "models")
    except (OSError, UnicodeDecodeError):
        pass
    roots += [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    return list(dict.fromkeys(roots))


def lmstudio_models() -> list[tuple[str, Path]]:
    """Every LM Studio model: ``publisher/repo/file.gguf`` and its path (first root wins)."""
    found: dict[str, Path] = {}
    for root in lmstudio_roots():
        if root.is_dir():
            for path in gguf_files(root):
                found.setdefault(path.relative_to(root).as_posix(), path)
    return sorted(found.items())


def lmstudio_file(name: str) -> Path:
    """An LM Studio model by ``publisher/repo/file.gguf``, or by a part of it that only one
    model's path contains."""
    models = lmstudio_models()
    exact = [path for key, path in models if key == name.strip("/")]
    matches = exact or [path for key, path in models if name.lower() in key.lower()]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SpecemError(
            f"no LM Studio model matches {name!r} (looked in {_looked_in(lmstudio_roots())}); "
            f"download it in LM Studio, or set {LMSTUDIO_ENV} to its models folder"
        )
    keys = [key for key, path in models if path in matches]
    raise SpecemError(f"{name!r} matches {len(keys)} LM Studio models ({', '.join(keys[:6])}); give more of the path")


# -- llama.cpp's old download cache ----------------------------------------------------------------
def llama_cpp_cache_dirs() -> list[Path]:
    """Where llama.cpp's ``-hf`` kept flat files before it moved to the Hugging Face cache."""
    override = os.environ.get(LLAMA_CACHE_ENV)
    if override:
        return [Path(override).expanduser()]
    home = Path.home()
    if sys.platform == "darwin":
        return [home / "Library" / "Caches" / "llama.cpp"]
    cache = os.environ.get("XDG_CACHE_HOME") or str(home / ".cache")
    return [Path(cache) / "llama.cpp"]


def llama_cpp_cached(repo: str, file: str) -> Path | None:
    """``<owner>_<repo>_<file>.gguf`` in llama.cpp's old cache, if it is there."""
    flat = f"{repo}/{file}".replace("/", "_")
    for folder in llama_cpp_cache_dirs():
        if (folder / flat).is_file():
            return folder / flat
    return None
