"""Where specem-local keeps things: the user's config, the model cache and the data (chats).

Each folder can be moved with an environment variable, which is also how the tests keep away
from a developer's own files.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs

APP_NAME = "specem-local"
CONFIG_ENV = "SPECEM_CONFIG"  # a models.toml file
CACHE_ENV = "SPECEM_CACHE_DIR"  # assembled demo models
DATA_ENV = "SPECEM_DATA_DIR"  # saved chats
CONFIG_FILENAME = "models.toml"


def user_config_path() -> Path:
    """``models.toml`` in the user config dir (``~/.config/specem-local/`` on Linux)."""
    return Path(platformdirs.user_config_dir(APP_NAME)) / CONFIG_FILENAME


def cache_dir() -> Path:
    """Where assembled demo models live; ``$SPECEM_CACHE_DIR`` overrides it."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir(APP_NAME))


def data_dir() -> Path:
    """Where chats are saved; ``$SPECEM_DATA_DIR`` overrides it."""
    override = os.environ.get(DATA_ENV)
    return Path(override) if override else Path(platformdirs.user_data_dir(APP_NAME))


def replace_file(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` in one step: a reader sees the old file or the new one, and a
    failure leaves the old one. ``mode``: the new file's permissions (default: the old file's,
    else 0644)."""
    if mode is None:
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
