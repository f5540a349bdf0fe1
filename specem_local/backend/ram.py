"""Host memory (RAM) for warnings and benchmarks: what is free now, a process's RSS and peak RSS."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path


def available_memory_bytes() -> int | None:
    """Memory available to new allocations (Linux MemAvailable; free pages elsewhere)."""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_warning(model_bytes: dict[str, int], available: int | None, where: str = "") -> str | None:
    """A one-line warning when the models' files alone exceed the memory available (``where``:
    "GPU " for the memory of the GPUs they are offloaded to)."""
    if available is None:
        return None
    total = sum(model_bytes.values())
    if total <= available:
        return None
    sizes = ", ".join(f"{name} {size / 2**30:.2f} GiB" for name, size in model_bytes.items())
    return (
        f"warning: the models need at least {total / 2**30:.2f} GiB ({sizes}) but only "
        f"{available / 2**30:.2f} GiB of {where}memory is available; expect swapping or a crash: "
        "use fewer or smaller models"
    )


def peak_rss_bytes() -> int:
    """This process's peak resident set size."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def rss_bytes(pid: int) -> int | None:
    """A process's resident set size now (Linux ``/proc``; None where that cannot be read)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    line = next((line for line in status.splitlines() if line.startswith("VmRSS:")), None)
    return int(line.split()[1]) * 1024 if line else None
