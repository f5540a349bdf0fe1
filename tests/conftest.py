"""Shared fixtures. Tests under tests/real_models need the demo models (real GGUFs through real
llama.cpp, assembled by the setup script) and are marked ``models`` here; so are the chat-app
modules that say ``pytestmark = pytest.mark.models``. ``pytest -m "not models"`` runs the rest
without any model."""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tqdm import tqdm

from specem_local.models.config import Config, ModelSpec, load_config
from specem_local.settings import EnsembleSettings

ROOT = Path(__file__).resolve().parents[1]


MODEL_TESTS = ROOT / "tests" / "real_models"

# tqdm's default lock is a multiprocessing semaphore, shared by every process forked from the one
# that made it: mutmut forks each mutant's tests from one server, so a mutant stopped while its
# progress bar held the lock left every later mutant waiting on it (counted as timeouts). A
# thread lock is each process's own; no monitor thread is forked while it holds it either.
tqdm.set_lock(threading.RLock())
tqdm.monitor_interval = 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    """Under mutation testing, a test stopped by pytest-timeout ends the run with mutmut's own
    timeout code (36): a mutant that only hangs is a timeout, reported apart, never a kill."""
    report = yield
    if os.environ.get("MUTANT_UNDER_TEST") and report.failed and "Timeout" in str(report.longrepr):  # type: ignore[attr-defined]
        os._exit(36)
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if MODEL_TESTS in item.path.parents:
            item.add_marker(pytest.mark.models)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory, monkeypatch):
    """Never read the developer's own models.toml or config dir; keep the model cache."""
    monkeypatch.delenv("SPECEM_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


def demo_config(*names: str, **settings) -> Config:
    """The built-in demo config, optionally restricted to some models, with settings. Every
    answer starts from the prior (``fresh_weights``) unless a test asks otherwise, so a test's
    answers do not depend on the tests before it."""
    base = load_config(ROOT / "models.toml")
    models = tuple(m for m in base.models if not names or m.name in names)
    if names:
        models = tuple(sorted(models, key=lambda m: names.index(m.name)))
    ensemble = EnsembleSettings(**{**_settings_dict(base.ensemble), "fresh_weights": True, **settings})
    return Config(ensemble, models, base.source, base.base_dir, base.load)


def _settings_dict(settings: EnsembleSettings) -> dict:
    return {name: getattr(settings, name) for name in settings.__dataclass_fields__}


def write_gguf(
    path: Path, metadata: dict[str, object], tensors: list[tuple[str, tuple[int, ...], int]], *, data: bool = True
) -> Path:
    """Write a small, valid GGUF v3 file (F32 tensors), for header tests without real models."""

    def string(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
    for key, value in metadata.items():
        out += string(key)
        if isinstance(value, str):
            out += struct.pack("<I", 8) + string(value)
        elif isinstance(value, list):
            out += struct.pack("<IIQ", 9, 8, len(value)) + b"".join(string(v) for v in value)
        else:
            out += struct.pack("<II", 4, value)
    offset = 0
    for name, shape, ggml_type in tensors:
        out += string(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", ggml_type, offset)
        count = 1
        for d in shape:
            count *= d
        offset += count * 4
    out += b"\0" * (-len(out) % 32)
    if data:
        out += b"\0" * offset
    path.write_bytes(bytes(out))
    return path


__all__ = ["ROOT", "ModelSpec", "demo_config", "write_gguf"]


def poll_until(condition: Callable[[], object], seconds: float, what: str, every: float = 0.02) -> None:
    """Wait for ``condition()`` to hold, checking every ``every`` seconds; fail after
    ``seconds`` saying ``what`` never happened (a race fails the test, it does not hang CI)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds} s: {what}")
        time.sleep(every)


def stop_process(process, seconds: float = 30) -> int:
    """End a server a test started: SIGTERM (a clean stop), then SIGKILL if it has not ended in
    ``seconds`` (the test fails then: it did not stop as promised), never left running."""
    import subprocess

    process.terminate()
    try:
        return process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"the process did not end within {seconds} s of SIGTERM") from None
