"""llama.cpp's shared library as this process uses it: loaded once, with the C++ runtime shared
(see below), its log kept quiet, Ctrl-C deferred around calls into C, and ggml's own C API
(devices, the RPC backend), which llama-cpp-python does not bind, loaded from the same folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path


def _share_the_cpp_runtime() -> None:
    """Put the system C++ runtime in the global symbol scope before libllama loads. When numpy
    (or another extension) loaded it first, privately, libllama's std:: references resolved to
    the weak copies inside libggml-cuda instead, and a CUDA build crashed in
    llama_model_load_from_file (std::regex in the tokenizer). Promoting the already-loaded
    runtime to global scope, as LD_PRELOAD would, fixed it on an H100 (docs/install.md)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)


def _no_backtrace() -> None:
    """ggml runs gdb and prints a backtrace when it aborts (20-70 lines, partly on stdout, which
    breaks ``--json``); no user of ours needs it. ``SPECEM_BACKTRACE=1`` keeps it, for
    debugging llama.cpp. Set before the library loads; worker processes inherit it."""
    if os.environ.get("SPECEM_BACKTRACE", "") not in ("1", "true", "yes"):
        os.environ.setdefault("GGML_NO_BACKTRACE", "1")


_share_the_cpp_runtime()
_no_backtrace()
import llama_cpp  # noqa: E402  (after the runtime is shared)

_LOG_LEVEL_ERROR = 4  # GGML_LOG_LEVEL_ERROR
recent_errors: deque[str] = deque(maxlen=8)
interrupted = threading.Event()  # Ctrl-C pressed while llama.cpp was calling back into Python


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    """Keep llama.cpp quiet; remember error lines so a failed load can say why."""
    if level == _LOG_LEVEL_ERROR and text:
        recent_errors.append(text.decode("utf-8", errors="replace").strip())


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Run a llama.cpp call with Ctrl-C noted instead of raised, then raise it once llama.cpp
    has returned. Raised inside a callback from C (the log or progress callback), a
    KeyboardInterrupt would be printed and dropped by ctypes, and the work would go on. Only
    the main thread gets signals; a handler someone else installed is left alone."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    signal.signal(signal.SIGINT, lambda _signal, _frame: interrupted.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    raise_deferred_interrupt()


def raise_deferred_interrupt() -> None:
    if interrupted.is_set():
        interrupted.clear()
        raise KeyboardInterrupt


_init_lock = threading.Lock()
_initialised = False


def init_backend() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _return_large_buffers_to_the_system()
            _initialised = True


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def _return_large_buffers_to_the_system() -> None:
    """Logits rows (0.2-1 MB each) are allocated and freed by the thousand. After the first
    large free, glibc raises its mmap threshold, so later rows come from the heap, which
    fragments: peak RSS grew 6.6% over 150 short answers (``research/soak.py``), 0.4% with the
    threshold fixed at glibc's default 128 KiB, at the same speed. Linux with glibc only."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # another C library (musl): nothing to tune
        return
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, 128 * 1024)


def supports_rpc() -> bool:
    """Whether this llama.cpp build has the RPC backend (members on other machines)."""
    init_backend()
    return bool(llama_cpp.llama_supports_rpc())


def system_info() -> str:
    """llama.cpp's own line about its build: backends and CPU features."""
    init_backend()
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip(" |")


@functools.cache
def ggml_library(name: str) -> ctypes.CDLL:
    """One of ggml's libraries (``ggml``, ``ggml-rpc``) from the folder llama-cpp-python loaded
    its own from; ``OSError`` if this build has none by that name."""
    folder = Path(llama_cpp.__file__).parent / "lib"
    found = sorted(folder.glob(f"lib{name}.*")) + sorted(folder.glob(f"{name}.dll"))
    return ctypes.CDLL(str(found[0]) if found else f"lib{name}.so")
