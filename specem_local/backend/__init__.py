"""Language models and the machine they run on.

``protocol`` says what the engine needs from a model (``LanguageModel``, ``BatchRow``) and
``scoring`` turns logits rows into segment scores; both are plain Python and numpy, so the
engine's tests run them with a fake model. ``library`` loads llama.cpp (the only module that
imports ``llama_cpp``), ``devices`` lists what can compute (local devices, ggml-rpc servers)
and runs an RPC server, ``model`` is one GGUF model with its context (``LlamaModel``),
``vocabulary`` its tokens, ``remote`` the same model computing in a worker process
(``WorkerModel``, ``worker``; members on other machines) under a ``watchdog``, ``ram`` reads
host memory.

May import: ``models`` (GGUF headers), ``settings``, ``errors``, ``dirs``. A llama.cpp that
cannot load costs the commands that need a model, not every command: its names then raise
the reason when used.
"""

from __future__ import annotations

# llama.cpp before numpy: on a CUDA build, numpy's C++ runtime loaded first made
# llama_model_load_from_file crash (docs/install.md). The top-level package imports this face
# first of all, and library imports llama_cpp (which loads libllama) and only then numpy.
try:
    from specem_local.backend.devices import Device, devices, gpu_offload
    from specem_local.backend.library import supports_rpc, system_info
    from specem_local.backend.model import LlamaModel
    from specem_local.backend.remote import WorkerModel, workers_supported
except (ImportError, OSError, RuntimeError) as _error:
    _unavailable: BaseException | None = _error
else:
    _unavailable = None

from specem_local.backend.protocol import BatchRow, ContextFull, LanguageModel
from specem_local.backend.ram import peak_rss_bytes, rss_bytes
from specem_local.backend.scoring import KEEP, RowScores, row_scores, segment_score

__all__ = [
    "KEEP",
    "BatchRow",
    "ContextFull",
    "Device",
    "LanguageModel",
    "LlamaModel",
    "RowScores",
    "WorkerModel",
    "devices",
    "gpu_offload",
    "peak_rss_bytes",
    "row_scores",
    "rss_bytes",
    "segment_score",
    "supports_rpc",
    "system_info",
    "workers_supported",
]


def __getattr__(name: str):
    if _unavailable is not None and name in __all__:
        raise _unavailable  # llama.cpp could not load: the reason, where a model is needed
    raise AttributeError(name)
