"""CMake flags for building llama.cpp (via llama-cpp-python) on the CPU at hand.

A default ``GGML_NATIVE`` build enables every instruction set the compiler detects, AMX
included; on some virtual machines the CPU reports AMX but faults on it (SIGILL in
``ggml_backend_amx_mul_mat``). So we build non-native and name the instruction sets the CPU
reports, never AMX. A user's own ``CMAKE_ARGS`` (Metal, CUDA, Vulkan) are kept, and the CPU
flags are added to them, unless they already choose the CPU side themselves (``GGML_NATIVE``,
an instruction set, AMX): a CUDA build still runs its CPU code on the host's CPU.

This file has no dependencies: ``scripts/setup.sh`` runs it with the system Python before
anything is installed.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path

# A user's CMAKE_ARGS that set any of these have chosen the CPU side of the build themselves.
CPU_SIDE = re.compile(r"-DGGML_(NATIVE|AVX\w*|AMX\w*|FMA|F16C|BMI2|SSE\w*|CPU_\w*)=", re.IGNORECASE)

# ggml's RPC backend, in every build: a member's layers on another machine's server.
RPC = "-DGGML_RPC=ON"
RPC_CHOSEN = re.compile(r"-DGGML_RPC=", re.IGNORECASE)

# /proc/cpuinfo flag -> ggml CMake option. Order matters only for readability.
X86_FEATURE_OPTIONS: tuple[tuple[str, str], ...] = (
    ("avx", "GGML_AVX"),
    ("avx2", "GGML_AVX2"),
    ("fma", "GGML_FMA"),
    ("f16c", "GGML_F16C"),
    ("bmi2", "GGML_BMI2"),
    ("avx512f", "GGML_AVX512"),
    ("avx512_vnni", "GGML_AVX512_VNNI"),
    ("avx512_bf16", "GGML_AVX512_BF16"),
    ("avx512vbmi", "GGML_AVX512_VBMI"),
    ("avx_vnni", "GGML_AVX_VNNI"),
)


def cpu_flags_from_cpuinfo(text: str) -> set[str]:
    """The feature flags of the first processor listed in a /proc/cpuinfo text."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cmake_args_for_x86(flags: set[str]) -> str:
    """Non-native x86 build options for exactly the instruction sets in ``flags``.

    AMX is never enabled: ``GGML_AMX_*`` stay off even when the CPU reports them.
    """
    options = ["-DGGML_NATIVE=OFF"]
    options += [f"-D{option}=ON" for feature, option in X86_FEATURE_OPTIONS if feature in flags]
    options += ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
    return " ".join(options)


def choose_cmake_args(env: dict[str, str], machine: str, cpuinfo: str | None) -> str:
    """The CMAKE_ARGS to build with: the user's own (a GPU backend, say) followed by the CPU
    flags derived from ``cpuinfo``, unless the user's already set the CPU side, and the RPC
    backend (members on other machines, docs/distributed.md) unless the user chose about it.

    On non-x86 machines (Apple Silicon, ARM laptops) llama.cpp's own CPU defaults are right,
    so only the user's flags are passed (with the RPC backend).
    """
    user = env.get("CMAKE_ARGS", "").strip()
    cpu = ""
    if machine.lower() in ("x86_64", "amd64", "i686", "i386") and cpuinfo:
        cpu = cmake_args_for_x86(cpu_flags_from_cpuinfo(cpuinfo))
    rpc = "" if RPC_CHOSEN.search(user) else RPC
    chosen = user if CPU_SIDE.search(user) or not cpu else f"{user} {cpu}".strip()
    return f"{chosen} {rpc}".strip()


def main() -> int:
    cpuinfo_path = Path("/proc/cpuinfo")
    cpuinfo = cpuinfo_path.read_text() if cpuinfo_path.exists() else None
    print(choose_cmake_args(dict(os.environ), platform.machine(), cpuinfo))
    return 0


if __name__ == "__main__":
    sys.exit(main())
