"""Adding a model to the user's ``models.toml`` (``specem models add``) or taking one out
(``specem models remove``), keeping the file's comments and layout: it is edited with
``tomlkit``, a format-preserving TOML library, or line by line where that keeps the comments
above each entry with it, and the result must load before it replaces the file.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from specem_local.dirs import file_lock, not_a_file, read_text, replace_file, user_config_path
from specem_local.errors import SpecemError
from specem_local.models.config import SOURCE_KEYS, bundled_config_text, find_config_path, parse_config
from specem_local.models.gguf import read_model_header
from specem_local.models.local_stores import lmstudio_file, ollama_blob
from specem_local.models.sources import GLOB_CHARACTERS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EDIT_WAIT = 10.0  # seconds an edit waits for another specem editing the same file
SOURCE_FORMS = "ollama:NAME, lmstudio:PUBLISHER/REPO/FILE.gguf, hf:OWNER/REPO/FILE.gguf, demo:NAME or a path"


def parse_source(text: str) -> dict[str, str]:
    """``specem models add``'s SOURCE as models.toml keys: ``ollama:llama3.2:1b`` ->
    ``{"ollama": "llama3.2:1b"}``; ``hf:owner/repo/file.gguf`` -> ``hf`` + ``file``; a path
    (made absolute, since models.toml paths are relative to the file)."""
    kind, separator, rest = text.partition(":")
    if kind == "hf":
        parts = rest.split("/")
        if len(parts) < 3 or not all(parts):
            raise SpecemError(f"{text!r}: write a Hugging Face file as hf:OWNER/REPO/FILE.gguf")
        return {"hf": "/".join(parts[:2]), "file": "/".join(parts[2:])}
    if kind in set(SOURCE_KEYS) - {"path"}:
        if not rest:
            raise SpecemError(f"{text!r} names no model; give one of: {SOURCE_FORMS}")
        where = {"ollama": ollama_blob, "lmstudio": lmstudio_file}.get(kind)
        if where is not None:  # on this disk now, or every later run would fail
            try:
                where(rest)
            except SpecemError as error:
                raise SpecemError(f"{error} (not added)") from None
        return {kind: rest}
    written = rest if kind == "path" else text
    if separator and kind != "path" and len(kind) > 1 and not Path(text).expanduser().exists():
        raise SpecemError(f"{text!r} is not a source; give one of: {SOURCE_FORMS}")
    path = Path(written).expanduser().absolute()
    if not (GLOB_CHARACTERS & set(written)) and not path.exists():
        raise SpecemError(f"no file or folder at {path}; give one of: {SOURCE_FORMS}")
    if not_a_file(path) is None:
        try:
            read_model_header(path)  # a truncated or foreign file is not added
        except SpecemError as error:
            raise SpecemError(f"{error} (not added)") from None
    return {"path": str(path)}


def file_to_edit(explicit: str | None) -> Path:
    """The models.toml that ``add`` changes: ``--config``, else the one in effect, else the one
    in the user config dir (never the copy inside the package)."""
    path = find_config_path(explicit)
    package = Path(str(resources.files("specem_local").joinpath("data"))).resolve()
    if path is None or package in path.resolve().parents:
        return user_config_path()
    return path


def _current_text(path: Path) -> str:
    return bundled_config_text() if not os.path.lexists(path) else read_text(path, "models.toml")


def free_name(path: Path, wanted: str) -> str:
    """``wanted``, or ``wanted-2``, ``wanted-3``… if the file already has a model by that name."""
    taken = {spec.name for spec in parse_config(_current_text(path), str(path), path.parent).models}
    return next(name for name in (wanted, *(f"{wanted}-{n}" for n in range(2, len(taken) + 3))) if name not in taken)


def add_model(path: Path, name: str, entry: dict[str, str]) -> bool:
    """Append a ``[[models]]`` entry to ``path`` (created from the built-in models.toml if it is
    not there). Returns whether the file was created."""
    with _editing(path):
        return _add_model(path, name, entry)


def _add_model(path: Path, name: str, entry: dict[str, str]) -> bool:
    import tomlkit

    created = not os.path.lexists(path)
    text = _current_text(path)
    try:
        document = tomlkit.parse(text)
    except tomlkit.exceptions.TOMLKitError as error:
        raise SpecemError(f"{path}: cannot read it as TOML ({error}); fix it first") from None
    config = parse_config(text, str(path), path.parent)
    for spec in config.models:
        if spec.name == name:
            raise SpecemError(f"{path} already has a model named {name!r}; pick another name")
        if all(getattr(spec, key) == value for key, value in entry.items()):
            raise SpecemError(f"{path} already has this model, as {spec.name!r}")
    table = tomlkit.table()
    table.add("name", name)
    for key, value in entry.items():
        table.add(key, value)
    models = document.get("models")
    if models is None:
        document.append("models", tomlkit.aot())
        models = document["models"]
    models.append(table)
    new_text = tomlkit.dumps(document)
    parse_config(new_text, str(path), path.parent)  # a broken entry never lands in the file
    replace_file(path, new_text)  # whole or not at all
    return created


@contextlib.contextmanager
def _editing(path: Path) -> Iterator[None]:
    """Held from reading ``path`` to writing it back, so that two specem processes editing it
    at once (``models add`` in a loop of a script, in two terminals) do not lose an edit: the
    second reads the file the first wrote. The lock is a hidden file beside it; its folder is
    made if need be."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SpecemError(f"cannot create {path.parent}: {error.strerror or error}") from None
    with file_lock(path.with_name(f".{path.name}.lock"), str(path), EDIT_WAIT):
        yield


MODELS_HEADER = re.compile(r"\s*\[\[\s*models\s*\]\]\s*(#.*)?$")
ANY_HEADER = re.compile(r"\s*\[")


def remove_model(path: Path, name: str) -> tuple[bool, dict[str, str]]:
    """Take the ``[[models]]`` entry ``name`` out of ``path`` (created from the built-in
    models.toml if it is not there), with the comment lines just above it; the rest of the file
    as it was. Returns whether the file was created, and the entry's source keys."""
    with _editing(path):
        return _remove_model(path, name)


def _remove_model(path: Path, name: str) -> tuple[bool, dict[str, str]]:
    import tomlkit

    created = not os.path.lexists(path)
    text = _current_text(path)
    config = parse_config(text, str(path), path.parent)
    names = [spec.name for spec in config.models]
    if name not in names:
        raise SpecemError(f"{path} has no model named {name!r}; it has {', '.join(map(repr, names))}")
    index = names.index(name)
    wanted = tomllib.loads(text)
    removed = wanted["models"].pop(index)
    new_text = _without_block(text, index)
    if new_text is None or tomllib.loads(new_text) != wanted:  # an entry not written as a [[models]] table
        document = tomlkit.parse(text)
        del document["models"][index]
        new_text = tomlkit.dumps(document)
    try:
        parse_config(new_text, str(path), path.parent)
    except SpecemError as error:
        raise SpecemError(f"{error} (not removed)") from None
    replace_file(path, new_text)  # whole or not at all
    keys = dict.fromkeys(key for kind in SOURCE_KEYS.values() for key in kind)
    return created, {key: str(removed[key]) for key in keys if key in removed}


def _without_block(text: str, index: int) -> str | None:
    """``text`` without its ``index``-th ``[[models]]`` table and the comment lines just above
    it; None when the headers cannot be told apart line by line."""
    lines = text.splitlines(keepends=True)
    headers = [number for number, line in enumerate(lines) if MODELS_HEADER.match(line)]
    if index >= len(headers):
        return None

    def above(number: int) -> int:  # the first of the comment lines just above a header
        while number > 0 and lines[number - 1].lstrip().startswith("#"):
            number -= 1
        return number

    start = above(headers[index])
    end = next((n for n in range(headers[index] + 1, len(lines)) if ANY_HEADER.match(lines[n])), len(lines))
    end = above(end) if end < len(lines) else end
    return "".join(lines[:start] + lines[end:])
