"""``models.toml``: which models take part and how the ensemble runs.

Parsed with the standard library's TOML reader into frozen dataclasses. Every mistake a user
can make (bad TOML, unknown or misspelt keys, wrong types, duplicate names, no models) becomes
a one-line ``SpecemError`` naming the file and what to change.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from specem_local.dirs import CONFIG_ENV, CONFIG_FILENAME, not_a_file, read_text, user_config_path
from specem_local.errors import SpecemError
from specem_local.models.demo_models import DEMO_MODELS
from specem_local.models.rpc import parse_endpoint, shared_endpoints
from specem_local.setting_fields import Limits, checked, checked_values, describe, unknown_key_error
from specem_local.settings import EnsembleSettings, LoadSettings, split_ensemble_table

ROLES = ("both", "draft", "verify", "reserve")  # reserve: answers alone, only when the ensemble is unsure
PLAIN_TEMPLATE = "plain"
DEFAULT_PALETTE = ("magenta", "green", "cyan", "yellow", "blue", "red")


@dataclass(frozen=True)
class ModelSpec:
    """One ``[[models]]`` entry. Exactly one source: ``path``, ``hf`` + ``file``, ``demo``,
    ``ollama`` or ``lmstudio``."""

    name: str
    path: str | None = None
    hf: str | None = None
    file: str | None = None
    demo: str | None = None
    ollama: str | None = None
    lmstudio: str | None = None
    n_ctx: int = field(default=2048, metadata={"limits": Limits(low=64)})
    n_gpu_layers: int | None = None  # None: [ensemble] gpu_layers (all layers on a GPU build)
    chat_template: str | None = None
    role: str = field(default="both", metadata={"limits": Limits(choices=ROLES)})
    color: str | None = None
    rpc: tuple[str, ...] = ()  # ggml-rpc servers ("host:port") that hold its layers (docs/distributed.md)
    isolate: bool = False  # compute in a worker process of its own, as a member with rpc servers does

    def __post_init__(self) -> None:
        checked(self, f"model {self.name!r}")
        check_model_name(self.name)
        if self.color is not None:
            check_colour(self.color, f"model {self.name!r}")
        source_key(self)  # exactly one source, with the keys it needs
        check_rpc(self)

    @property
    def reserve(self) -> bool:
        """Loaded, but out of the ensemble's answers: it answers alone when one is unsure
        (``escalate_below``)."""
        return self.role == "reserve"

    @property
    def drafts(self) -> bool:
        return self.role in ("both", "draft")

    @property
    def verifies(self) -> bool:
        return self.role in ("both", "verify")


# Each kind of source (sources.SOURCE_KINDS) by its key, with every key it reads.
SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "path": ("path",),
    "hf": ("hf", "file"),
    "demo": ("demo",),
    "ollama": ("ollama",),
    "lmstudio": ("lmstudio",),
}


def source_key(spec: ModelSpec) -> str:
    """The one kind of source a ``[[models]]`` entry names (its key), or a one-line error."""
    where = f"model {spec.name!r}"
    named = [key for key in SOURCE_KEYS if getattr(spec, key)]
    if len(named) != 1:
        raise SpecemError(
            f'{where}: give exactly one source: path = "...gguf", hf = "owner/repo" with file = "...gguf", '
            f'ollama = "llama3.2:1b", lmstudio = "publisher/repo/file.gguf" or demo = "..." '
            f"(got {', '.join(named) or 'none'})"
        )
    kind = named[0]
    for key in SOURCE_KEYS[kind]:
        if not getattr(spec, key):
            raise SpecemError(f"{where}: {kind} = {getattr(spec, kind)!r} needs {key} = ... too")
    for other, keys in SOURCE_KEYS.items():
        for key in keys:
            if key not in SOURCE_KEYS[kind] and getattr(spec, key):
                raise SpecemError(f"{where}: {key} = {getattr(spec, key)!r} goes with {other} = ..., not {kind}")
    if kind == "demo" and spec.demo not in DEMO_MODELS:
        raise SpecemError(f"{where}: unknown demo model {spec.demo!r}; the demo models are {', '.join(DEMO_MODELS)}")
    return kind


@dataclass(frozen=True)
class Config:
    ensemble: EnsembleSettings
    models: tuple[ModelSpec, ...]
    source: str = "<built-in>"
    base_dir: Path = field(default_factory=Path.cwd)
    load: LoadSettings = field(default_factory=LoadSettings)

    def resolve_path(self, path: str) -> Path:
        """A model path as written in the file: ``~`` expanded, relative to the file."""
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else self.base_dir / candidate


MAX_NAME = 64


def check_rpc(spec: ModelSpec) -> None:
    """Each ``rpc`` entry is host:port, each named once; the layers are split across several."""
    for text in spec.rpc:
        try:
            parse_endpoint(text)
        except ValueError as error:
            raise SpecemError(f"model {spec.name!r}: rpc entry {error}") from None
    if len({parse_endpoint(text) for text in spec.rpc}) < len(spec.rpc):
        raise SpecemError(f"model {spec.name!r}: an rpc endpoint is listed twice; list each server once")
    if spec.rpc and spec.n_gpu_layers == 0:
        raise SpecemError(
            f"model {spec.name!r}: n_gpu_layers = 0 keeps every layer here, so its rpc servers would hold none; "
            "leave n_gpu_layers out to send them all, or give how many to send"
        )
    if len(spec.rpc) > MAX_RPC_SERVERS:
        raise SpecemError(f"model {spec.name!r}: rpc lists {len(spec.rpc)} servers; ggml-rpc takes at most 16")


MAX_RPC_SERVERS = 16  # GGML_RPC_MAX_SERVERS


def check_model_name(name: str) -> None:
    """A model's name is shown in every table, legend and the server's model list, and typed
    after ``--model``: 1 to 64 printable characters, no space at either end."""
    shown = repr(name[:40] + ("..." if len(name) > 40 else ""))
    if not name.strip():
        problem = "is empty"
    elif name != name.strip():
        problem = "starts or ends with a space"
    elif len(name) > MAX_NAME:
        problem = f"is {len(name):,} characters long (at most {MAX_NAME})"
    elif not name.isprintable():
        problem = "holds a control character (a newline, a tab or an escape)"
    else:
        return
    raise SpecemError(f"model name {shown} {problem}; use letters, digits and - . _ :")


def check_colour(colour: str, where: str) -> None:
    """A ``color`` must be one the chat app can draw (Textual's names, ``#rrggbb``, ``rgb()``)."""
    from textual.color import Color, ColorParseError

    try:
        Color.parse(colour)
    except ColorParseError as error:
        hint = f"did you mean {error.suggested_color!r}? " if error.suggested_color else ""
        raise SpecemError(
            f'{where}: color {colour!r} is not a colour; {hint}use a name such as "magenta" or a hex '
            'value such as "#ff8800"'
        ) from None


def model_colours(config: Config) -> dict[str, str]:
    """Each model's colour name: its ``color`` in models.toml, else one from the palette."""
    return {
        spec.name: spec.color or DEFAULT_PALETTE[index % len(DEFAULT_PALETTE)]
        for index, spec in enumerate(config.models)
    }


def parse_config(text: str, source: str, base_dir: Path) -> Config:
    """Build a ``Config`` from TOML text; errors name ``source`` (and the line for bad TOML)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecemError(f"{source}: invalid TOML: {error}") from None
    unknown = sorted(set(data) - {"ensemble", "models"})
    if unknown:
        raise unknown_key_error(unknown[0], ["ensemble", "models"], source, "table")
    ensemble_table = data.get("ensemble", {})
    if not isinstance(ensemble_table, dict):
        raise SpecemError(f"{source}: ensemble must be a table: [ensemble]")
    model_tables = data.get("models", [])
    if not isinstance(model_tables, list) or not all(isinstance(m, dict) for m in model_tables):
        raise SpecemError(f"{source}: models must be an array of tables: [[models]]")
    try:
        ensemble, load = split_ensemble_table(ensemble_table, f"{source} [ensemble]")
        if not model_tables:
            raise SpecemError(
                f"{source}: no models configured; add at least one [[models]] entry "
                "with a name and a path, hf or demo source"
            )
        models = []
        for index, table in enumerate(model_tables, start=1):
            if "name" not in table:
                raise SpecemError(f"{source}: [[models]] entry {index} has no name")
            where = f"{source} [[models]] {table['name']!r}"
            models.append(ModelSpec(**checked_values(ModelSpec, table, where)))
    except SpecemError as error:  # the same error (a SettingError stays one), naming the file
        if not str(error).startswith(source):
            error.args = (f"{source}: {error}",)
        raise error from None
    names = [model.name for model in models]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SpecemError(f"{source}: duplicate model name {duplicates[0]!r}; names must be unique")
    shared = shared_endpoints({model.name: model.rpc for model in models})
    if shared:
        endpoint, first, second = shared
        raise SpecemError(
            f"{source}: models {first!r} and {second!r} both use the RPC server {endpoint}; a ggml-rpc server "
            "serves one client's model at a time: start another (specem rpc-serve --port N) for the second"
        )
    if not any(model.drafts for model in models):
        raise SpecemError(f'{source}: no model can draft; give at least one role = "both" or "draft"')
    if not any(model.verifies for model in models):
        raise SpecemError(f'{source}: no model can verify; give at least one role = "both" or "verify"')
    return Config(ensemble, tuple(models), source, base_dir, load)


DEFAULT_ENSEMBLE = "demo"


def builtin_ensembles() -> dict[str, str]:
    """The built-in ensembles by name: the demo trio (``demo``, the default) and the files in
    ``data/ensembles/``."""
    folder = resources.files("specem_local").joinpath("data").joinpath("ensembles")
    named = {entry.name.removesuffix(".toml"): f"ensembles/{entry.name}" for entry in folder.iterdir()}
    return {DEFAULT_ENSEMBLE: CONFIG_FILENAME, **dict(sorted(named.items()))}


def bundled_config_text(name: str = DEFAULT_ENSEMBLE) -> str:
    files = builtin_ensembles()
    if name not in files:
        raise SpecemError(f"no built-in ensemble {name!r}; the built-in ones are {', '.join(files)}")
    return resources.files("specem_local").joinpath("data", *files[name].split("/")).read_text("utf-8")


def find_config_path(explicit: str | Path | None = None) -> Path | None:
    """The config file to use: --config, $SPECEM_CONFIG, ./models.toml, the user config dir.

    ``None`` means the bundled default ensemble.
    """
    for candidate, label in ((explicit, "--config"), (os.environ.get(CONFIG_ENV), f"${CONFIG_ENV}")):
        if candidate:
            path = Path(candidate).expanduser()
            kind = not_a_file(path, pipes=True)  # a pipe is read: --config <(...)
            if kind is not None:
                raise SpecemError(f"{label} points at {path}: {kind}")
            return path
    for path in (Path.cwd() / CONFIG_FILENAME, user_config_path()):
        if path.is_file():
            return path
    return None


def load_config(explicit: str | Path | None = None, ensemble: str | None = None) -> Config:
    """The configuration: a built-in ensemble by name (``ensemble``), else the lookup."""
    if ensemble is not None:
        if explicit is not None:
            raise SpecemError("give --config or --ensemble, not both")
        return parse_config(bundled_config_text(ensemble), f"<built-in ensemble {ensemble}>", Path.cwd())
    path = find_config_path(explicit)
    if path is None:
        return parse_config(bundled_config_text(), "<built-in models.toml>", Path.cwd())
    text = read_text(path, "config", pipes=True)
    return parse_config(text, str(path), path.parent.resolve())


def with_load_overrides(config: Config, overrides: dict[str, Any]) -> tuple[Config, dict[str, Any]]:
    """Apply the load-time settings among ``overrides`` (None: not given) to ``config``;
    return it and the other overrides."""
    load_names = {item.name for item in describe(LoadSettings)}
    load = {key: value for key, value in overrides.items() if key in load_names and value is not None}
    rest = {key: value for key, value in overrides.items() if key not in load_names}
    if load:
        config = dataclasses.replace(
            config, load=dataclasses.replace(config.load, **checked_values(LoadSettings, load, ""))
        )
    return config, rest
