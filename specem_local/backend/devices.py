"""ggml's devices, local and remote (llama-cpp-python binds neither): what this process can
compute on, the devices of a ggml-rpc server (a member's layers on another machine), and that
server itself, started from the installed library so client and server are one version.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from specem_local.backend.library import ggml_library, init_backend
from specem_local.errors import SpecemError

# -- what llama.cpp was built with, and the devices it sees ----------------------------------------
DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "integrated GPU", 3: "accelerator"}  # enum ggml_backend_dev_type


@dataclass(frozen=True)
class Device:
    name: str  # e.g. "CUDA0", "Metal", "CPU"
    description: str  # e.g. "NVIDIA H100 80GB HBM3"
    kind: str  # a value of DEVICE_TYPES
    free_bytes: int
    total_bytes: int


@functools.cache
def _ggml() -> ctypes.CDLL:
    """ggml's device API."""
    lib = ggml_library("ggml")
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for function in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
        function.argtypes = [ctypes.c_void_p]
        function.restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    size = ctypes.POINTER(ctypes.c_size_t)
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, size, size]
    return lib


def devices() -> list[Device]:
    """Every device llama.cpp can compute on, with its free and total memory now."""
    init_backend()
    try:
        lib = _ggml()
    except (OSError, AttributeError):
        return []
    found = []
    for index in range(lib.ggml_backend_dev_count()):
        device = lib.ggml_backend_dev_get(index)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        found.append(
            Device(
                (lib.ggml_backend_dev_name(device) or b"").decode(),
                (lib.ggml_backend_dev_description(device) or b"").decode(),
                DEVICE_TYPES.get(lib.ggml_backend_dev_type(device), "unknown"),
                free.value,
                total.value,
            )
        )
    return found


def gpu_offload() -> bool:
    """Whether this llama.cpp build can put layers on a GPU (CUDA, Metal, Vulkan, ...). Not
    ``llama_supports_gpu_offload()``: that is true for a build with only the RPC backend too."""
    return any(device.kind in ("GPU", "integrated GPU") for device in devices())


# -- ggml-rpc: a member's layers on another machine ---------------------------------------------------
@functools.cache
def _rpc() -> ctypes.CDLL:
    """ggml's RPC backend library; ``SpecemError`` when this build has none."""
    try:
        lib = ggml_library("ggml-rpc")
    except OSError:
        raise SpecemError(
            "this llama.cpp was built without the RPC backend; run ./scripts/setup.sh again (it builds with "
            "-DGGML_RPC=ON) or add -DGGML_RPC=ON to CMAKE_ARGS"
        ) from None
    lib.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
    lib.ggml_backend_rpc_start_server.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_void_p),
    ]
    lib.ggml_backend_rpc_start_server.restype = None
    ggml = _ggml()
    ggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    ggml.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_by_name.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_dev_by_name.restype = ctypes.c_void_p
    return lib


def rpc_devices(endpoint: str) -> list[int]:
    """The devices of the ggml-rpc server at ``endpoint`` (``rpc.probe`` it first: ggml ends the
    process when it cannot connect). They are not registered with ggml, so no other model is
    offloaded to them by accident; ``LlamaModel(rpc=...)`` passes them to its own load."""
    init_backend()
    registry = _rpc().ggml_backend_rpc_add_server(endpoint.encode())
    if not registry:
        raise SpecemError(f"the RPC server {endpoint} offers no device")
    ggml = _ggml()
    return [ggml.ggml_backend_reg_dev_get(registry, i) for i in range(ggml.ggml_backend_reg_dev_count(registry))]


def device_memory(device: int) -> tuple[int, int]:
    """A device's free and total memory in bytes (for a remote one, as its server says)."""
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    _ggml().ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
    return free.value, total.value


def serve_rpc(endpoint: str, cache_dir: str | None, threads: int, device_names: list[str]) -> None:
    """Run ggml's RPC server on ``endpoint`` with these local devices; returns only if it
    cannot start (its socket, a device), having said why on stderr."""
    init_backend()
    lib, ggml = _rpc(), _ggml()
    handles = [ggml.ggml_backend_dev_by_name(name.encode()) for name in device_names]
    if not all(handles):
        raise SpecemError(f"no device named {device_names[handles.index(None)]!r}; see specem rpc-serve --help")
    array = (ctypes.c_void_p * len(handles))(*handles)
    lib.ggml_backend_rpc_start_server(
        endpoint.encode(), cache_dir.encode() if cache_dir else None, threads, len(handles), array
    )
