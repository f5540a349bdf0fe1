"""Where models run: all layers on the GPU when llama.cpp was built with a GPU backend, none
otherwise, with a fake answer from the backend's probe (the real CPU build says 0 layers)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specem_local import backend
from specem_local.backend import Device
from specem_local.backend.protocol import offloaded_layers, placement
from specem_local.commands.models import model_rows
from specem_local.engine import loading
from specem_local.engine.loading import memory_warnings
from specem_local.models.config import parse_config
from tests.conftest import write_gguf

GIB = 2**30


def test_layers_offloaded():
    assert offloaded_layers(-1, 25, gpu_build=True) == 25 and offloaded_layers(10, 25, gpu_build=True) == 10
    assert offloaded_layers(99, 25, gpu_build=True) == 25 and offloaded_layers(-1, 25, gpu_build=False) == 0
    assert placement(25, 25) == "GPU 25/25 layers" and placement(0, 25) == "CPU"


def config_with_three(tmp_path, ensemble: str = ""):
    for name in ("a", "b", "c"):
        write_gguf(
            tmp_path / f"{name}.gguf", {"general.architecture": "llama", "llama.block_count": 30}, [("w", (8,), 0)]
        )
    text = f"[ensemble]\n{ensemble}\n" + "".join(
        f'[[models]]\nname = "{name}"\npath = "{name}.gguf"\n{extra}'
        for name, extra in (("a", ""), ("b", "n_gpu_layers = 0\n"), ("c", "n_gpu_layers = 12\n"))
    )
    return parse_config(text, "models.toml", tmp_path)


def test_a_gpu_build_offloads_every_layer_unless_told(tmp_path, monkeypatch):
    monkeypatch.setattr(backend, "gpu_offload", lambda: True)
    runs_on = [row["runs_on"] for row in model_rows(config_with_three(tmp_path))]
    assert runs_on == ["GPU 31/31 layers", "CPU", "GPU 12/31 layers"]
    runs_on = [row["runs_on"] for row in model_rows(config_with_three(tmp_path, "gpu_layers = 5"))]
    assert runs_on == ["GPU 5/31 layers", "CPU", "GPU 12/31 layers"]


def test_a_cpu_build_runs_everything_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(backend, "gpu_offload", lambda: False)
    assert [row["runs_on"] for row in model_rows(config_with_three(tmp_path))] == ["CPU"] * 3


BUILD_STAMP = Path(sys.prefix) / ".llama-cpp-python-build"  # scripts/setup.sh's record of the build's flags


@pytest.mark.skipif(not BUILD_STAMP.is_file(), reason="llama.cpp was not built by scripts/setup.sh here")
def test_gpu_offload_says_what_this_build_was_made_with():
    """Checked against the flags the setup built llama.cpp with, not against itself."""
    flags = BUILD_STAMP.read_text()
    gpu = any(f"-DGGML_{backend_name}=on" in flags for backend_name in ("CUDA", "METAL", "VULKAN", "HIP", "SYCL"))
    assert backend.gpu_offload() == gpu


def test_offloaded_models_count_against_gpu_memory(tmp_path, monkeypatch):
    config = config_with_three(tmp_path)
    sizes = {"a": 3 * GIB, "b": GIB, "c": 3 * GIB}
    monkeypatch.setattr(loading, "available_memory_bytes", lambda: 16 * GIB)
    monkeypatch.setattr(backend, "gpu_offload", lambda: True)
    monkeypatch.setattr(backend, "devices", lambda: [Device("CUDA0", "a GPU", "GPU", 4 * GIB, 8 * GIB)])
    [warning] = memory_warnings(config, sizes)
    assert "6.00 GiB (a 3.00 GiB, c 3.00 GiB)" in warning and "4.00 GiB of GPU memory" in warning
    monkeypatch.setattr(backend, "gpu_offload", lambda: False)
    assert memory_warnings(config, sizes) == []  # 7 GiB in 16 GiB of host memory
    monkeypatch.setattr(loading, "available_memory_bytes", lambda: 5 * GIB)
    assert "of memory is available" in memory_warnings(config, sizes)[0]
