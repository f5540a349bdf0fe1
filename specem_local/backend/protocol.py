"""What the ensemble needs from one language model, and nothing more.

``backend.LlamaModel`` implements it with llama.cpp; the tests implement it with a small fake
(tiny vocabulary, scripted logits) so the round loop can be tested in seconds.

The model holds one context whose KV memory is *unified*: sequences share cells, so copying a
committed prefix to another sequence is cheap, and every cell of every sequence counts against
``n_ctx``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from specem_local.backend.scoring import RowScores
from specem_local.errors import Signal


class ContextFull(Signal):
    """The KV memory has no room for a batch (llama.cpp's ``llama_decode`` returned 1)."""


class MemberLost(Signal):
    """A model computing elsewhere (in a worker process, its layers on other machines) can no
    longer answer: a step missed its deadline or the worker died. Its member leaves the answer
    and the others go on; the next answer tries to bring it back (``restart``)."""


class StepAbandoned(Signal):
    """A step ``interrupt()`` stopped waiting for (Ctrl-C, a cancelled answer): the answer is
    over; the model stays usable."""


@dataclass(frozen=True)
class BatchRow:
    """One token to decode: at ``position`` in sequence ``seq_id``; ``wants_logits`` asks for
    the logits row that predicts the next token."""

    token: int
    position: int
    seq_id: int
    wants_logits: bool


class LanguageModel(Protocol):
    """One model with one context. Not thread-safe: one thread at a time per instance."""

    n_ctx: int  # KV cells, shared by every sequence
    n_vocab: int
    n_seq_max: int  # sequence ids are 0 .. n_seq_max - 1
    n_params: int
    placement: str  # where it runs, in words: "CPU" or "GPU 25/25 layers"
    bos_token: int  # -1 when the model has none
    eos_token: int
    adds_bos: bool
    lost: str | None  # why it can no longer compute (its worker ended), or None

    def tokenize(self, text: str, *, parse_special: bool = False, add_bos: bool = False) -> list[int]:
        """Text as tokens. Message text uses ``parse_special=False``, so a ``<|im_end|>`` typed
        by a user stays text; only template scaffolding parses special tokens."""
        ...

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for (special tokens: none)."""
        ...

    def special_text(self, token: int) -> str:
        """A special token's own text (``<bos>``), for chat templates that print it."""
        ...

    def is_eog(self, token: int) -> bool:
        """Whether the token ends generation (end of sequence, end of turn, ...)."""
        ...

    @property
    def eog_tokens(self) -> np.ndarray:
        """Every end-of-generation token id."""
        ...

    def chat_template(self) -> str | None:
        """The Jinja chat template in the model file, if any."""
        ...

    def grammar_tokenizer(self) -> Any:
        """llguidance's ``LLTokenizer`` for this vocabulary, built once and kept (the model must
        outlive it): structured output masks each drafted token with it."""
        ...

    def decode(self, rows: Sequence[BatchRow]) -> np.ndarray:
        """Decode the rows in one batch; return the logits rows that were asked for, in order,
        as a float array of shape ``(n_wanted, n_vocab)``. ``ContextFull`` when the KV memory
        has no room for them."""
        ...

    def decode_scores(self, rows: Sequence[BatchRow], targets: Sequence[int], *, normalise: bool) -> RowScores:
        """Decode the rows in one batch and score the rows that were asked for, in order:
        ``scoring.row_scores`` of them, without copying them out but for ``KEEP`` targets."""
        ...

    def seq_copy(self, source: int, target: int, start: int = -1, end: int = -1) -> None:
        """Make ``target`` share ``source``'s cells in positions ``[start, end)`` (-1: open)."""
        ...

    def seq_remove(self, seq_id: int, start: int = -1, end: int = -1) -> None:
        """Drop a sequence's cells in ``[start, end)``; a negative ``seq_id`` means every one."""
        ...

    def seq_keep(self, seq_id: int) -> None:
        """Drop every cell that ``seq_id`` does not use."""
        ...

    def clear(self) -> None:
        """Empty the KV memory."""
        ...

    def set_threads(self, threads: int) -> None:
        """The CPU threads the next decodes use (the engine shares the cores among models
        that decode at once)."""
        ...

    def interrupt(self) -> None:
        """Stop waiting for a step in flight (another thread's): it raises ``StepAbandoned``
        within a second. Does nothing where steps cannot hang (in this process)."""
        ...

    def restart(self) -> None:
        """Bring a lost model back (probe its servers, load it again); ``SpecemError`` saying
        why it cannot. Does nothing to a model that is not lost."""
        ...

    def close(self) -> None:
        """Free the model; no call may follow."""
        ...


def offloaded_layers(wanted: int, layers: int, gpu_build: bool) -> int:
    """How many of a model's ``layers`` llama.cpp puts on the GPU for ``n_gpu_layers = wanted``
    (-1 = all): none on a build without a GPU backend."""
    if not gpu_build:
        return 0
    return layers if wanted < 0 else min(wanted, layers)


def placement(offloaded: int, layers: int) -> str:
    """Where a model runs, in words: ``GPU 25/25 layers`` or ``CPU``."""
    return f"GPU {offloaded}/{layers} layers" if offloaded else "CPU"


def vocabulary_digest(model: LanguageModel) -> str:
    """A fingerprint of a model's vocabulary: every token's bytes and which tokens end
    generation. Two models with the same digest spell every token id the same way, so one can
    read the other's tokens (token-level contrast)."""
    digest = hashlib.sha256(model.n_vocab.to_bytes(8, "little"))
    for token in range(model.n_vocab):
        piece = model.token_bytes(token)
        digest.update(len(piece).to_bytes(4, "little") + piece)
    digest.update(np.asarray(model.eog_tokens, dtype=np.int64).tobytes())
    return digest.hexdigest()
