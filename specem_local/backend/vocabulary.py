"""A GGUF model's vocabulary through llama.cpp: tokenize, the bytes of each token, which tokens
end generation, the chat template and llguidance's tokenizer. ``LlamaModel`` has these on the
model it computes with; ``WorkerModel`` (a member whose layers are on other machines) loads the
file's vocabulary alone (``vocab_only``, no weights, no RPC) so that none of this crosses to
its worker process.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any

import numpy as np

from specem_local.backend.library import init_backend, llama_cpp, recent_errors
from specem_local.errors import SpecemError
from specem_local.models.gguf import read_model_header

GRAMMAR_PIECE_BYTES = 16 * 1024  # the longest token piece the grammar tokenizer reads


class LlamaVocabulary:
    """What a llama.cpp model knows of its tokens. Subclasses set ``_model`` (a loaded
    ``llama_model``) and call ``_take_vocabulary()``."""

    _model: Any = None
    _grammar_tokenizer: Any = None

    def _take_vocabulary(self) -> None:
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.bos_token = int(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_token = int(llama_cpp.llama_vocab_eos(self._vocab))
        self.adds_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self._piece_cache: dict[int, bytes] = {}

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

    def grammar_tokenizer(self) -> Any:
        """llguidance's tokenizer for this vocabulary (structured output), built on first use and
        kept; every end-of-generation token ends a constrained answer. Built as llguidance's
        ``lltokenizer_from_vocab`` builds it (control tokens marked with a 0xff byte, llama.cpp's
        own tokenizer for text), with llama.cpp's current attribute call."""
        if self._grammar_tokenizer is None:
            import llguidance

            special = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
            buffer = ctypes.create_string_buffer(GRAMMAR_PIECE_BYTES)
            pieces = []
            for token in range(self.n_vocab):
                size = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, GRAMMAR_PIECE_BYTES, 0, True)
                piece = buffer.raw[: max(size, 0)]
                attributes = llama_cpp.llama_vocab_get_attr(self._vocab, token)
                if attributes & special or (
                    attributes & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED and piece[:1] == b"<" and piece[-1:] == b">"
                ):
                    piece = b"\xff" + piece
                pieces.append(piece)
            tokenize = ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
            self._grammar_tokenizer = llguidance.LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
                tokens=pieces,
                vocab_ptr=self._vocab,
                tokenize_fptr=tokenize,
                eos_token=[int(token) for token in self.eog_tokens],
                slices=None,
            )
        return self._grammar_tokenizer

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def close(self) -> None:
        """Free the model; the grammar tokenizer, which points into its vocabulary, goes first."""
        self._grammar_tokenizer = None
        model, self._model = self._model, None  # forgotten first: an interrupt between never frees twice
        if model:
            llama_cpp.llama_model_free(model)

    def __del__(self) -> None:
        self.close()


class VocabularyOnly(LlamaVocabulary):
    """A GGUF file's vocabulary and chat template, without its weights (milliseconds to load,
    a few MB): what a process needs of a model whose computing is done elsewhere."""

    def __init__(self, path: Path) -> None:
        self._model = None
        self.path = path
        read_model_header(path)
        init_backend()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        params.n_gpu_layers = 0
        recent_errors.clear()
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            reason = recent_errors[-1] if recent_errors else "unknown error"
            raise SpecemError(f"llama.cpp could not read the vocabulary of {path}: {reason}")
        self._take_vocabulary()
