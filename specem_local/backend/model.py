"""One GGUF model with one llama.cpp context: the ``protocol.LanguageModel`` protocol implemented
with llama.cpp. It owns the C resources (freed context first, then model), turns llama.cpp's
return codes into exceptions, and offers the few operations the ensemble needs: tokenize,
decode a batch of (token, position, sequence) rows with logits for chosen rows, and the
sequence (KV memory) operations. A model may keep its layers on ggml-rpc servers (``rpc``).

Built on the public low-level API on purpose: the high-level ``Llama(logits_all=True)`` would
allocate ``n_ctx x n_vocab`` floats per model (gigabytes for 150k-260k vocabularies).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from specem_local.backend.devices import gpu_offload, rpc_devices
from specem_local.backend.library import (
    ctrl_c_deferred,
    init_backend,
    interrupted,
    llama_cpp,
    raise_deferred_interrupt,
    recent_errors,
)
from specem_local.backend.protocol import BatchRow, ContextFull, offloaded_layers, placement
from specem_local.backend.scoring import RowScores, row_scores
from specem_local.backend.vocabulary import LlamaVocabulary
from specem_local.errors import SpecemError
from specem_local.models.gguf import read_model_header


class LlamaModel(LlamaVocabulary):
    """One llama.cpp model and context. Not thread-safe: one thread at a time per instance."""

    lost: str | None = None  # in this process, a model is never lost: a fault is an exception

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
        rpc: Sequence[str] = (),
    ) -> None:
        """``rpc``: ggml-rpc servers (``host:port``, probed already) that hold ``n_gpu_layers`` of
        its layers (-1: all), split across them by their free memory; none: the layers stay
        here (or ``n_gpu_layers`` go to a local GPU)."""
        self._model = None
        self._ctx = None
        self._batch = None
        read_model_header(path)  # reject non-GGUF and truncated files before llama.cpp sees them
        init_backend()
        self.path = path
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = n_gpu_layers
        self.rpc = tuple(rpc)
        if self.rpc:  # a NULL-terminated array of the servers' devices, for this model only
            remote = [device for endpoint in self.rpc for device in rpc_devices(endpoint)]
            self._devices = (ctypes.c_void_p * (len(remote) + 1))(*remote, None)
            model_params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if progress is not None:

            def on_progress(fraction: float, _user: ctypes.c_void_p) -> bool:
                try:
                    progress(float(fraction))
                except KeyboardInterrupt:
                    interrupted.set()
                return not interrupted.is_set()  # False makes llama.cpp stop loading

            self._progress_callback = llama_cpp.llama_progress_callback(on_progress)
            model_params.progress_callback = self._progress_callback
        recent_errors.clear()
        with self._freed_on_ctrl_c():
            self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), model_params)
        if not self._model:
            reason = recent_errors[-1] if recent_errors else "unknown error"
            raise SpecemError(f"llama.cpp could not load {path}: {reason}")
        self._take_vocabulary()

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
            reason = recent_errors[-1] if recent_errors else "out of memory?"
            raise SpecemError(f"llama.cpp could not create a context of {n_ctx} tokens for {path}: {reason}")
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self.n_batch = n_batch
        self.n_threads = n_threads
        self.n_seq_max = n_seq_max
        self.n_params = int(llama_cpp.llama_model_n_params(self._model))
        layers = int(llama_cpp.llama_model_n_layer(self._model)) + 1  # the repeating layers and the output
        self.gpu_layers = offloaded_layers(n_gpu_layers, layers, gpu_offload() or bool(self.rpc))
        self.placement = f"RPC {', '.join(self.rpc)}" if self.rpc else placement(self.gpu_layers, layers)
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)

    # -- lifetime ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _freed_on_ctrl_c(self) -> Iterator[None]:
        """A loading step that Ctrl-C stops (see ``library.ctrl_c_deferred``); what was loaded is freed."""
        try:
            with ctrl_c_deferred():
                yield
            raise_deferred_interrupt()  # from the progress callback, in any thread
        except KeyboardInterrupt:
            self.close()
            raise

    def close(self) -> None:
        """Free the batch, then the context, then the model (llama.cpp's required order)."""
        batch, self._batch = self._batch, None  # forgotten first: an interrupt between never frees twice
        if batch is not None:
            llama_cpp.llama_batch_free(batch)
        ctx, self._ctx = self._ctx, None
        if ctx:
            llama_cpp.llama_free(ctx)
        super().close()

    def interrupt(self) -> None:
        """A step in this process ends by itself (Ctrl-C waits for llama.cpp to return)."""

    def restart(self) -> None:
        """A model in this process is never lost."""

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
            assert batch is not None  # freed only by close()
            batch.n_tokens = len(chunk)
            for index, row in enumerate(chunk):
                batch.token[index] = row.token
                batch.pos[index] = row.position
                batch.n_seq_id[index] = 1
                batch.seq_id[index][0] = row.seq_id
                batch.logits[index] = row.wants_logits
            with ctrl_c_deferred():
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
