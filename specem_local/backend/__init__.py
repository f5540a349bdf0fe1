"""Language models and the machine they run on.

``protocol`` says what the engine needs from a model (``LanguageModel``, ``BatchRow``) and
``scoring`` turns logits rows into segment scores; both are plain Python and numpy, so the
engine's tests run them with a fake model. ``library`` loads llama.cpp (the only module that
imports ``llama_cpp``), ``devices`` lists what can compute (local devices, ggml-rpc servers)
and runs an RPC server, ``model`` is one GGUF model with its context (``LlamaModel``), ``ram``
reads host memory.

May import: ``models`` (GGUF headers), ``settings``, ``errors``, ``dirs``. The names from
``library``, ``devices`` and ``model`` are looked up when first used, so a llama.cpp that cannot
load costs the commands that need a model, not every command.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

# llama.cpp before numpy: on a CUDA build, numpy's C++ runtime loaded first made
# llama_model_load_from_file crash (docs/install.md). library imports llama_cpp (which loads
# libllama) and only then numpy; a llama.cpp that cannot load is said when a model loads.
with contextlib.suppress(ImportError, OSError, RuntimeError):
    from specem_local.backend import library as _library  # noqa: F401

from specem_local.backend.protocol import BatchRow, ContextFull, LanguageModel
from specem_local.backend.ram import peak_rss_bytes, rss_bytes
from specem_local.backend.scoring import KEEP, RowScores, row_scores, segment_score

if TYPE_CHECKING:
    from specem_local.backend.devices import Device, devices, gpu_offload
    from specem_local.backend.library import supports_rpc, system_info
    from specem_local.backend.model import LlamaModel

__all__ = [
    "KEEP",
    "BatchRow",
    "ContextFull",
    "Device",
    "LanguageModel",
    "LlamaModel",
    "RowScores",
    "devices",
    "gpu_offload",
    "peak_rss_bytes",
    "row_scores",
    "rss_bytes",
    "segment_score",
    "supports_rpc",
    "system_info",
]

_LAZY = {
    "Device": "devices",
    "devices": "devices",
    "gpu_offload": "devices",
    "supports_rpc": "library",
    "system_info": "library",
    "LlamaModel": "model",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"specem_local.backend.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(name)
