"""The llama.cpp backend: the only module that imports ``llama_cpp``.

One ``LlamaModel`` is one GGUF model with one context: the ``model.LanguageModel`` protocol
implemented with llama.cpp. It owns the C resources (freed context first, then model), turns
llama.cpp's return codes into exceptions, and offers the few operations the ensemble needs:
tokenize, decode a batch of (token, position, sequence) rows with logits for chosen rows, and
the sequence (KV memory) operations.

Built on the public low-level API on purpose: the high-level ``Llama(logits_all=True)`` would
allocate ``n_ctx x n_vocab`` floats per model (gigabytes for 150k-260k vocabularies).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
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


_share_the_cpp_runtime()
import llama_cpp  # noqa: E402  (after the runtime is shared)
import numpy as np  # noqa: E402

from specem_local.errors import SpecemError  # noqa: E402
from specem_local.gguf import read_model_header  # noqa: E402
from specem_local.model import BatchRow, ContextFull, offloaded_layers, placement  # noqa: E402
from specem_local.scoring import RowScores, row_scores  # noqa: E402

_LOG_LEVEL_ERROR = 4  # GGML_LOG_LEVEL_ERROR
_recent_errors: deque[str] = deque(maxlen=8)
_interrupted = threading.Event()  # Ctrl-C pressed while llama.cpp was calling back into Python


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    """Keep llama.cpp quiet; remember error lines so a failed load can say why."""
    if level == _LOG_LEVEL_ERROR and text:
        _recent_errors.append(text.decode("utf-8", errors="replace").strip())


@contextlib.contextmanager
def _ctrl_c_deferred() -> Iterator[None]:
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
    signal.signal(signal.SIGINT, lambda _signal, _frame: _interrupted.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _raise_deferred_interrupt()


def _raise_deferred_interrupt() -> None:
    if _interrupted.is_set():
        _interrupted.clear()
        raise KeyboardInterrupt


_init_lock = threading.Lock()
_initialised = False


def _init_backend() -> None:
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


# -- what llama.cpp was built with, and the devices it sees ----------------------------------------
DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "integrated GPU", 3: "accelerator"}  # enum ggml_backend_dev_type


@dataclass(frozen=True)
class Device:
    name: str  # e.g. "CUDA0", "Metal", "CPU"
    description: str  # e.g. "NVIDIA H100 80GB HBM3"
    kind: str  # a value of DEVICE_TYPES
    free_bytes: int
    total_bytes: int


def gpu_offload() -> bool:
    """Whether this llama.cpp build can put layers on a GPU (CUDA, Metal, Vulkan, ...)."""
    _init_backend()
    return bool(llama_cpp.llama_supports_gpu_offload())


def system_info() -> str:
    """llama.cpp's own line about its build: backends and CPU features."""
    _init_backend()
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip(" |")


@functools.cache
def _ggml() -> ctypes.CDLL:
    """ggml's device API (not bound by llama-cpp-python), from the library it loaded."""
    folder = Path(llama_cpp.__file__).parent / "lib"
    names = sorted(folder.glob("libggml.*")) + sorted(folder.glob("ggml.dll"))
    lib = ctypes.CDLL(str(names[0]) if names else "libggml.so")
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
    _init_backend()
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


class LlamaModel:
    """One llama.cpp model and context. Not thread-safe: one thread at a time per instance."""

    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int,
        n_seq_max: int,
        n_threads: int,
        n_gpu_layers: int = 0,
        n_batch: int = 512,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        self._model = None
        self._ctx = None
        self._batch = None
        read_model_header(path)  # reject non-GGUF and truncated files before llama.cpp sees them
        _init_backend()
        self.path = path
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = n_gpu_layers
        if progress is not None:

            def on_progress(fraction: float, _user: ctypes.c_void_p) -> bool:
                try:
                    progress(float(fraction))
                except KeyboardInterrupt:
                    _interrupted.set()
                return not _interrupted.is_set()  # False makes llama.cpp stop loading

            self._progress_callback = llama_cpp.llama_progress_callback(on_progress)
            model_params.progress_callback = self._progress_callback
        _recent_errors.clear()
        with self._freed_on_ctrl_c():
            self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), model_params)
        if not self._model:
            reason = _recent_errors[-1] if _recent_errors else "unknown error"
            raise SpecemError(f"llama.cpp could not load {path}: {reason}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)

        ctx_params = llama_cpp.llama_context_default_params()
        n_batch = min(n_batch, n_ctx)  # llama.cpp caps a batch at n_ctx
        ctx_params.n_ctx = n_ctx
        ctx_params.n_batch = n_batch
        ctx_params.n_ubatch = n_batch
        ctx_params.n_seq_max = n_seq_max
        ctx_params.n_threads = n_threads
        ctx_params.n_threads_batch = n_threads
        ctx_params.kv_unified = True  # sequences share the prefix cells; seq_cp is cheap
        ctx_params.swa_full = True  # sliding-window models (Gemma 3) keep every cell, so
        # removing a rejected candidate's tail never needs cells the window dropped
        ctx_params.no_perf = True
        with self._freed_on_ctrl_c():
            self._ctx = llama_cpp.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            self.close()
            reason = _recent_errors[-1] if _recent_errors else "out of memory?"
            raise SpecemError(f"llama.cpp could not create a context of {n_ctx} tokens for {path}: {reason}")
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self.n_batch = n_batch
        self.n_threads = n_threads
        self.n_seq_max = n_seq_max
        self.n_params = int(llama_cpp.llama_model_n_params(self._model))
        layers = int(llama_cpp.llama_model_n_layer(self._model)) + 1  # the repeating layers and the output
        self.gpu_layers = offloaded_layers(n_gpu_layers, layers, gpu_offload())
        self.placement = placement(self.gpu_layers, layers)
        self.bos_token = int(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_token = int(llama_cpp.llama_vocab_eos(self._vocab))
        self.adds_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._piece_cache: dict[int, bytes] = {}

    # -- lifetime ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _freed_on_ctrl_c(self) -> Iterator[None]:
        """A loading step that Ctrl-C stops (see ``_ctrl_c_deferred``); what was loaded is freed."""
        try:
            with _ctrl_c_deferred():
                yield
            _raise_deferred_interrupt()  # from the progress callback, in any thread
        except KeyboardInterrupt:
            self.close()
            raise

    def close(self) -> None:
        """Free the batch, then the context, then the model (llama.cpp's required order)."""
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        self.close()

    # -- vocabulary -------------------------------------------------------------------------
    def tokenize(self, text: str, *, parse_special: bool = False, add_bos: bool = False) -> list[int]:
        """Tokenize text. User and model text must use ``parse_special=False`` so that a
        literal ``<|im_end|>`` in it stays text; only template scaffolding parses specials."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        while True:
            buffer = (llama_cpp.llama_token * capacity)()
            count = llama_cpp.llama_tokenize(self._vocab, data, len(data), buffer, capacity, add_bos, parse_special)
            if count >= 0:
                return list(buffer[:count])
            capacity = -count

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for (special tokens render as nothing)."""
        cached = self._piece_cache.get(token)
        if cached is not None:
            return cached
        buffer = ctypes.create_string_buffer(64)
        size = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, 64, 0, False)
        if size < 0:
            buffer = ctypes.create_string_buffer(-size)
            size = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, -size, 0, False)
        piece = buffer.raw[:size]
        self._piece_cache[token] = piece
        return piece

    def special_text(self, token: int) -> str:
        """A special token's own text (``<bos>``), for chat templates that print it."""
        if token < 0:
            return ""
        raw = llama_cpp.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @functools.cached_property
    def eog_tokens(self) -> np.ndarray:
        """Every token llama.cpp treats as end-of-generation (found once, by asking for each)."""
        return np.array([t for t in range(self.n_vocab) if self.is_eog(t)], dtype=np.intp)

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    # -- decoding ---------------------------------------------------------------------------
    def decode(self, rows: Sequence[BatchRow]) -> np.ndarray:
        """Decode ``rows`` (split into n_batch chunks); return a copy of the logits of the rows
        that asked for them, in order, as a float32 array of shape (n_wanted, n_vocab)."""
        outputs = [logits.copy() for _, logits in self._decode_chunks(rows)]
        if not outputs:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return outputs[0] if len(outputs) == 1 else np.concatenate(outputs)

    def decode_scores(self, rows: Sequence[BatchRow], targets: Sequence[int], *, normalise: bool) -> RowScores:
        """Decode ``rows`` and score the wanted rows where llama.cpp left them: no row is
        copied out but those whose target is ``KEEP`` (see ``scoring.row_scores``)."""
        parts = []
        for start, logits in self._decode_chunks(rows):
            parts.append(row_scores(logits, targets[start : start + len(logits)], normalise=normalise, overwrite=True))
        return RowScores.join(parts)

    def _decode_chunks(self, rows: Sequence[BatchRow]) -> Iterator[tuple[int, np.ndarray]]:
        """Decode ``rows`` in n_batch chunks; after each, yield how many wanted rows came before
        it and a view of its wanted rows in llama.cpp's output buffer (valid until the next
        decode; a caller may overwrite it)."""
        done = 0
        for start in range(0, len(rows), self.n_batch):
            chunk = rows[start : start + self.n_batch]
            batch = self._batch
            batch.n_tokens = len(chunk)
            for index, row in enumerate(chunk):
                batch.token[index] = row.token
                batch.pos[index] = row.position
                batch.n_seq_id[index] = 1
                batch.seq_id[index][0] = row.seq_id
                batch.logits[index] = row.wants_logits
            with _ctrl_c_deferred():
                code = llama_cpp.llama_decode(self._ctx, batch)
            if code == 1:
                raise ContextFull(f"no KV cache slot for {len(chunk)} tokens (n_ctx {self.n_ctx})")
            if code != 0:
                raise SpecemError(f"llama.cpp decode failed with code {code} for {self.path.name}")
            wanted = sum(row.wants_logits for row in chunk)
            if wanted:
                pointer = llama_cpp.llama_get_logits(self._ctx)
                yield done, np.ctypeslib.as_array(pointer, shape=(wanted, self.n_vocab))
                done += wanted

    # -- sequences (KV memory) ----------------------------------------------------------------
    def seq_copy(self, source: int, target: int, start: int = -1, end: int = -1) -> None:
        llama_cpp.llama_memory_seq_cp(self._memory, source, target, start, end)

    def seq_remove(self, seq_id: int, start: int = -1, end: int = -1) -> None:
        """Remove a sequence's cells in [start, end); a negative seq id means every sequence.
        (Called directly: the convenience wrapper turns a negative id into 0.)"""
        if not llama_cpp.llama_memory_seq_rm(self._memory, seq_id, start, end):
            raise SpecemError(f"llama.cpp could not remove positions {start}..{end} of sequence {seq_id}")

    def seq_keep(self, seq_id: int) -> None:
        llama_cpp.llama_memory_seq_keep(self._memory, seq_id)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)

    def set_threads(self, threads: int) -> None:
        """Decode with ``threads`` CPU threads from the next call on (a context parameter)."""
        if threads != self.n_threads:
            llama_cpp.llama_set_n_threads(self._ctx, threads, threads)
            self.n_threads = threads
