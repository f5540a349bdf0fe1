"""The llama.cpp backend: the only package that imports ``llama_cpp``.

``library`` loads llama.cpp and ggml's C API; ``devices`` lists what can compute (local
devices, ggml-rpc servers) and runs an RPC server; ``model`` is one GGUF model with its
context (``LlamaModel``).
"""

from specem_local.backend.devices import Device, devices, gpu_offload
from specem_local.backend.library import supports_rpc, system_info
from specem_local.backend.model import LlamaModel

__all__ = ["Device", "LlamaModel", "devices", "gpu_offload", "supports_rpc", "system_info"]
