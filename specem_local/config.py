"""``models.toml``: which models take part and how the ensemble runs.

Parsed with the standard library's TOML reader into frozen dataclasses. Every mistake a user
can make (bad TOML, unknown or misspelt keys, wrong types, duplicate names, no models) becomes
a one-line ``SpecemError`` naming the file and what to change.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from specem_local.errors import SpecemError

APP_NAME = "specem-local"
CONFIG_ENV = "SPECEM_CONFIG"
CONFIG_FILENAME = "models.toml"

SCORING_MODES = ("logit", "logprob")
WEIGHT_PRIORS = ("uniform", "size")
POOLINGS = ("linear", "log")
NORMALISE_UNITS = ("token", "segment")
DRAFTING_MODES = ("round-robin", "threads")
ROLES = ("both", "draft", "verify")
PLAIN_TEMPLATE = "plain"
DEFAULT_PALETTE = ("magenta", "green", "cyan", "yellow", "blue", "red")


@dataclass(frozen=True)
class EnsembleSettings:
    """The ``[ensemble]`` table. Every field can be overridden from the CLI and the TUI."""

    segment_tokens: int = 10
    max_tokens: int = 256
    ignore_eos: bool = False
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    seed: int = 0
    greedy: bool = False
    scoring: str = "logprob"
    normalise: str = "segment"
    feedback: bool = True
    learning_rate: float = 1.0
    weight_prior: str = "size"
    weighted_judges: bool = False
    pooling: str = "linear"
    self_vote: bool = True
    verify_end: bool = True
    loop_guard: bool = False
    fast_finish: bool = False
    model_exit: bool = False
    exit_warmup_rounds: int = 4
    exit_share: float = 0.8
    drafting: str = "round-robin"
    threads_per_model: int = 2
    stop: tuple[str, ...] = ()
    system_prompt: str = ""

    def __post_init__(self) -> None:
        _check_choice("scoring", self.scoring, SCORING_MODES)
        _check_choice("drafting", self.drafting, DRAFTING_MODES)
        _check_choice("weight_prior", self.weight_prior, WEIGHT_PRIORS)
        _check_choice("pooling", self.pooling, POOLINGS)
        _check_choice("normalise", self.normalise, NORMALISE_UNITS)
        for name in ("segment_tokens", "max_tokens", "threads_per_model"):
            if getattr(self, name) < 1:
                raise SpecemError(f"[ensemble] {name} must be at least 1, got {getattr(self, name)}")
        for name in ("top_k", "exit_warmup_rounds"):
            if getattr(self, name) < 0:
                raise SpecemError(f"[ensemble] {name} must not be negative")
        if self.temperature < 0:
            raise SpecemError("[ensemble] temperature must not be negative (0 means greedy)")
        if not 0 < self.top_p <= 1:
            raise SpecemError(f"[ensemble] top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise SpecemError(f"[ensemble] min_p must be in [0, 1), got {self.min_p}")
        if self.learning_rate < 0:
            raise SpecemError("[ensemble] learning_rate must not be negative")
        if not 0 <= self.exit_share <= 1:
            raise SpecemError(f"[ensemble] exit_share must be in [0, 1], got {self.exit_share}")


@dataclass(frozen=True)
class ModelSpec:
    """One ``[[models]]`` entry. Exactly one source: ``path``, ``hf`` + ``file``, or ``demo``."""

    name: str
    path: str | None = None
    hf: str | None = None
    file: str | None = None
    demo: str | None = None
    n_ctx: int = 2048
    n_gpu_layers: int = 0
    chat_template: str | None = None
    role: str = "both"
    color: str | None = None

    def __post_init__(self) -> None:
        where = f"model {self.name!r}"
        sources = [key for key in ("path", "hf", "demo") if getattr(self, key)]
        if len(sources) != 1:
            raise SpecemError(
                f'{where}: give exactly one source: path = "...gguf", hf = "owner/repo" '
                f'with file = "...gguf", or demo = "..." (got {", ".join(sources) or "none"})'
            )
        if self.hf and not self.file:
            raise SpecemError(f'{where}: hf = {self.hf!r} needs file = "<name>.gguf" too')
        if self.file and not self.hf:
            raise SpecemError(f'{where}: file = {self.file!r} goes with hf = "owner/repo"')
        _check_choice(f"{where} role", self.role, ROLES)
        if self.n_ctx < 64:
            raise SpecemError(f"{where}: n_ctx must be at least 64, got {self.n_ctx}")

    @property
    def source(self) -> str:
        if self.path:
            return f"path:{self.path}"
        if self.hf:
            return f"hf:{self.hf}/{self.file}"
        return f"demo:{self.demo}"

    @property
    def drafts(self) -> bool:
        return self.role in ("both", "draft")

    @property
    def verifies(self) -> bool:
        return self.role in ("both", "verify")


@dataclass(frozen=True)
class Config:
    ensemble: EnsembleSettings
    models: tuple[ModelSpec, ...]
    source: str = "<built-in>"
    base_dir: Path = field(default_factory=Path.cwd)

    def resolve_path(self, path: str) -> Path:
        """A model path as written in the file: ``~`` expanded, relative to the file."""
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else self.base_dir / candidate


def model_colours(config: Config) -> dict[str, str]:
    """Each model's colour name: its ``color`` in models.toml, else one from the palette."""
    return {
        spec.name: spec.color or DEFAULT_PALETTE[index % len(DEFAULT_PALETTE)]
        for index, spec in enumerate(config.models)
    }


def _check_choice(what: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise SpecemError(f"{what} must be one of {', '.join(choices)}; got {value!r}")


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "table"}.get(
        type(value), type(value).__name__
    )


def _coerce(where: str, key: str, value: Any, expected: Any) -> Any:
    """Check one TOML value against a dataclass field type; integers are fine for floats."""
    expected_name = str(expected).replace(" ", "")
    if expected_name in ("bool",):
        ok = isinstance(value, bool)
        wanted = "true or false"
    elif expected_name in ("int",):
        ok = isinstance(value, int) and not isinstance(value, bool)
        wanted = "an integer"
    elif expected_name in ("float",):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
        wanted = "a number"
    elif expected_name in ("str", "str|None"):
        ok = isinstance(value, str)
        wanted = "a string"
    elif expected_name == "tuple[str,...]":
        ok = isinstance(value, list) and all(isinstance(item, str) for item in value)
        value = tuple(value) if ok else value
        wanted = "an array of strings"
    else:  # pragma: no cover - a field type this function was not taught
        raise AssertionError(f"unhandled field type {expected_name}")
    if not ok:
        raise SpecemError(f"{where}: {key} must be {wanted}, got {_type_name(value)} {value!r}")
    return value


def _checked_values(cls: type, table: dict[str, Any], where: str) -> dict[str, Any]:
    """The table's values, each checked against the dataclass field of the same name."""
    known = {f.name: f.type for f in fields(cls)}
    values = {}
    for key, value in table.items():
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
            raise SpecemError(f"{where}: unknown key {key!r}{hint}")
        values[key] = _coerce(where, key, value, known[key])
    return values


def _build(cls: type, table: dict[str, Any], where: str) -> Any:
    return cls(**_checked_values(cls, table, where))


def ensemble_overrides(table: dict[str, Any], where: str) -> dict[str, Any]:
    """``[ensemble]`` overrides from a table of TOML values, type-checked like models.toml."""
    return _checked_values(EnsembleSettings, table, where)


def parse_config(text: str, source: str, base_dir: Path) -> Config:
    """Build a ``Config`` from TOML text; errors name ``source`` (and the line for bad TOML)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecemError(f"{source}: invalid TOML: {error}") from None
    unknown = set(data) - {"ensemble", "models"}
    if unknown:
        key = sorted(unknown)[0]
        close = difflib.get_close_matches(key, ["ensemble", "models"], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; expected [ensemble] and [[models]]"
        raise SpecemError(f"{source}: unknown table {key!r}{hint}")
    ensemble_table = data.get("ensemble", {})
    if not isinstance(ensemble_table, dict):
        raise SpecemError(f"{source}: ensemble must be a table: [ensemble]")
    model_tables = data.get("models", [])
    if not isinstance(model_tables, list) or not all(isinstance(m, dict) for m in model_tables):
        raise SpecemError(f"{source}: models must be an array of tables: [[models]]")
    try:
        ensemble = _build(EnsembleSettings, ensemble_table, f"{source} [ensemble]")
        if not model_tables:
            raise SpecemError(
                f"{source}: no models configured; add at least one [[models]] entry "
                "with a name and a path, hf or demo source"
            )
        models = []
        for index, table in enumerate(model_tables, start=1):
            if "name" not in table:
                raise SpecemError(f"{source}: [[models]] entry {index} has no name")
            models.append(_build(ModelSpec, table, f"{source} [[models]] {table['name']!r}"))
    except SpecemError as error:
        message = str(error)
        raise SpecemError(message if message.startswith(source) else f"{source}: {message}") from None
    names = [model.name for model in models]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SpecemError(f"{source}: duplicate model name {duplicates[0]!r}; names must be unique")
    if not any(model.drafts for model in models):
        raise SpecemError(f'{source}: no model can draft; give at least one role = "both" or "draft"')
    if not any(model.verifies for model in models):
        raise SpecemError(f'{source}: no model can verify; give at least one role = "both" or "verify"')
    return Config(ensemble, tuple(models), source, base_dir)


def bundled_config_text() -> str:
    return resources.files("specem_local").joinpath("data", CONFIG_FILENAME).read_text("utf-8")


def user_config_path() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / CONFIG_FILENAME


def find_config_path(explicit: str | Path | None = None) -> Path | None:
    """The config file to use: --config, $SPECEM_CONFIG, ./models.toml, the user config dir.

    ``None`` means the bundled default ensemble.
    """
    for candidate, label in ((explicit, "--config"), (os.environ.get(CONFIG_ENV), f"${CONFIG_ENV}")):
        if candidate:
            path = Path(candidate).expanduser()
            if not path.is_file():
                raise SpecemError(f"{label} points at {path}, which does not exist")
            return path
    for path in (Path.cwd() / CONFIG_FILENAME, user_config_path()):
        if path.is_file():
            return path
    return None


def load_config(explicit: str | Path | None = None) -> Config:
    path = find_config_path(explicit)
    if path is None:
        return parse_config(bundled_config_text(), "<built-in models.toml>", Path.cwd())
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecemError(f"{path}: cannot read: {error}") from None
    return parse_config(text, str(path), path.parent.resolve())


def with_overrides(settings: EnsembleSettings, **overrides: Any) -> EnsembleSettings:
    """A copy of ``settings`` with the non-None overrides applied (and validated)."""
    return dataclasses.replace(settings, **{k: v for k, v in overrides.items() if v is not None})
