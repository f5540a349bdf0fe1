"""A fake language model for fast tests of the round loop: the ``LanguageModel`` protocol with
a byte-level vocabulary, logits from a script, and a KV memory that checks what llama.cpp would.

- Vocabulary: token 0 ends generation, token 1 begins a sequence, 2..257 are the 256 bytes, then
  optional whole words, so two fakes can tokenize the same text differently. Tokenizing takes
  the longest piece at each step.
- Logits: each fake wants to write one answer (``target``). Given the text after the last
  ``### Assistant:`` header (the plain prompt format), it finds the longest start of the target
  that the answer ends with and puts ``strength`` on the longest piece that continues it (from
  the beginning again when the answer has left the target), or on the end token (``filler``
  second) when the answer ends with the whole target; ``runner_up`` adds a character always one
  logit behind (a model torn between two continuations).
- KV memory (``max_batch`` makes larger batches find no slot, like a fragmented cache): cells
  shared between sequences, counted against ``n_ctx``; a decode must continue each sequence at
  its next position and use sequence ids below ``n_seq_max``; any call after ``close()`` or a
  ``close()`` during a decode is recorded in ``violations``.
- Loss (a member whose worker process ended): ``lose(reason)`` makes every later decode and
  sequence call raise ``MemberLost``, as a ``WorkerModel`` does; ``restart()`` brings it back
  with an empty memory unless ``comes_back`` is False.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specem_local.backend.protocol import BatchRow, ContextFull, MemberLost
from specem_local.backend.scoring import RowScores, row_scores
from specem_local.engine.prompting import PLAIN_ANSWER_HEADER
from specem_local.errors import SpecemError

EOS, BOS = 0, 1
BYTE_BASE = 2


@dataclass
class Cell:
    position: int
    token: int
    seqs: set[int] = field(default_factory=set)


class FakeModel:
    def __init__(
        self,
        target: str,
        *,
        words: Sequence[str] = (),
        n_ctx: int = 512,
        n_seq_max: int = 4,
        n_params: int = 1000,
        strength: float = 8.0,
        filler: str = " la",
        on_decode: Callable[[FakeModel, Sequence[BatchRow]], None] | None = None,
        max_batch: int | None = None,
        runner_up: str | None = None,
    ) -> None:
        self.target = target.encode()
        self.pieces: list[bytes] = [b"", b""] + [bytes([b]) for b in range(256)] + [w.encode() for w in words]
        self.n_vocab = len(self.pieces)
        self.n_ctx = n_ctx
        self.n_seq_max = n_seq_max
        self.n_params = n_params
        self.placement = "CPU"
        self.bos_token, self.eos_token, self.adds_bos = BOS, EOS, False
        self.strength = strength
        self.filler = filler.encode()
        self.on_decode = on_decode
        self.max_batch = max_batch  # a larger batch finds no KV slot, as in a fragmented cache
        self.runner_up = runner_up  # a character it always rates one logit below its choice (torn)
        self.cells: list[Cell] = []
        self.decodes = 0  # decode calls
        self.decoded_rows = 0
        self.violations: list[str] = []
        self.closed = False
        self.threads = 1
        self._decoding = False
        self._grammar_tokenizer = None
        self.lost: str | None = None
        self.comes_back = True
        self.restarts = 0

    # -- vocabulary ----------------------------------------------------------------------------
    def tokenize(self, text: str, *, parse_special: bool = False, add_bos: bool = False) -> list[int]:
        data = text.encode("utf-8")
        tokens = [BOS] if add_bos else []
        while data:
            best = max(
                (i for i in range(BYTE_BASE, self.n_vocab) if data.startswith(self.pieces[i])),
                key=lambda i: len(self.pieces[i]),
            )
            tokens.append(best)
            data = data[len(self.pieces[best]) :]
        return tokens

    def token_bytes(self, token: int) -> bytes:
        return self.pieces[token]

    def special_text(self, token: int) -> str:
        return {EOS: "<eos>", BOS: "<bos>"}.get(token, "")

    def is_eog(self, token: int) -> bool:
        return token == EOS

    @property
    def eog_tokens(self) -> np.ndarray:
        return np.array([EOS])

    def grammar_tokenizer(self):
        """llguidance's tokenizer over this byte vocabulary (the end token marked special)."""
        if self._grammar_tokenizer is None:
            import llguidance

            model = self

            class Vocabulary:
                eos_token_id, bos_token_id, special_token_ids = EOS, BOS, [EOS, BOS]
                tokens = [b"\xff<eos>", b"\xff<bos>", *self.pieces[BYTE_BASE:]]

                def __call__(self, text: bytes | str) -> list[int]:
                    return model.tokenize(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)

            self._grammar_tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Vocabulary()))
        return self._grammar_tokenizer

    def chat_template(self) -> str | None:
        return None

    # -- the script ----------------------------------------------------------------------------
    def next_logits(self, history: list[int]) -> np.ndarray:
        """What this fake predicts after ``history`` (a whole sequence)."""
        text = b"".join(self.pieces[t] for t in history)
        header = PLAIN_ANSWER_HEADER.encode()
        answer = text[text.rfind(header) + len(header) :] if header in text else b""
        logits = np.zeros(self.n_vocab, dtype=np.float32)
        logits[BOS] = -30.0
        written = next(k for k in range(min(len(answer), len(self.target)), -1, -1) if answer.endswith(self.target[:k]))
        if written < len(self.target):
            logits[self._longest_piece(self.target[written:])] = self.strength
        else:
            logits[EOS] = self.strength
            logits[self._longest_piece(self.filler)] = self.strength / 2
        if self.runner_up is not None:
            logits[self._longest_piece(self.runner_up.encode())] = self.strength - 1.0
        return logits

    def _longest_piece(self, data: bytes) -> int:
        return max(
            (i for i in range(BYTE_BASE, self.n_vocab) if data.startswith(self.pieces[i])),
            key=lambda i: len(self.pieces[i]),
        )

    # -- decoding and the KV memory ------------------------------------------------------------
    def decode(self, rows: Sequence[BatchRow]) -> np.ndarray:
        self._check_open("decode")
        if self._decoding:
            self.violations.append("two decodes at once")
        self.decodes += 1
        self._decoding = True
        try:
            if self.on_decode is not None:
                self.on_decode(self, rows)
            if len(self.cells) + len(rows) > self.n_ctx or len(rows) > (self.max_batch or len(rows)):
                raise ContextFull(f"no KV slot for {len(rows)} tokens ({len(self.cells)} of {self.n_ctx} cells used)")
            outputs = []
            for row in rows:
                if not 0 <= row.seq_id < self.n_seq_max:
                    raise AssertionError(f"sequence id {row.seq_id} is not below n_seq_max {self.n_seq_max}")
                expected = len(self.sequence(row.seq_id))
                if row.position != expected:
                    raise AssertionError(f"sequence {row.seq_id}: position {row.position}, expected {expected}")
                self.cells.append(Cell(row.position, row.token, {row.seq_id}))
                if row.wants_logits:
                    outputs.append(self.next_logits(self.sequence(row.seq_id)))
            self.decoded_rows += len(rows)
            return np.array(outputs, dtype=np.float32).reshape(len(outputs), self.n_vocab)
        finally:
            self._decoding = False

    def decode_scores(self, rows: Sequence[BatchRow], targets: Sequence[int], *, normalise: bool) -> RowScores:
        return row_scores(self.decode(rows), targets, normalise=normalise, overwrite=True)

    def sequence(self, seq_id: int) -> list[int]:
        """The tokens of a sequence in position order (checked to be 0, 1, 2, ...)."""
        cells = sorted((c for c in self.cells if seq_id in c.seqs), key=lambda c: c.position)
        if [c.position for c in cells] != list(range(len(cells))):
            raise AssertionError(f"sequence {seq_id} has holes: {[c.position for c in cells]}")
        return [c.token for c in cells]

    def seq_copy(self, source: int, target: int, start: int = -1, end: int = -1) -> None:
        self._check_open("seq_copy")
        for cell in self._in_range(start, end):
            if source in cell.seqs:
                cell.seqs.add(target)

    def seq_remove(self, seq_id: int, start: int = -1, end: int = -1) -> None:
        self._check_open("seq_remove")
        for cell in self._in_range(start, end):
            cell.seqs = set() if seq_id < 0 else cell.seqs - {seq_id}
        self.cells = [c for c in self.cells if c.seqs]

    def seq_keep(self, seq_id: int) -> None:
        self._check_open("seq_keep")
        for cell in self.cells:
            cell.seqs &= {seq_id}
        self.cells = [c for c in self.cells if c.seqs]

    def clear(self) -> None:
        self._check_open("clear")
        self.cells = []

    def set_threads(self, threads: int) -> None:
        assert not self._decoding, "threads changed during a decode"
        self.threads = threads

    def lose(self, reason: str) -> None:
        self.lost = reason

    def interrupt(self) -> None:
        """Steps here never hang."""

    def restart(self) -> None:
        if self.lost is None:
            return
        self.restarts += 1
        if not self.comes_back:
            raise SpecemError(f"cannot come back: {self.lost}")
        self.lost = None
        self.cells = []

    def close(self) -> None:
        if self._decoding:
            self.violations.append("closed during a decode")
        self.closed = True

    def _in_range(self, start: int, end: int) -> list[Cell]:
        low = 0 if start < 0 else start
        return [c for c in self.cells if c.position >= low and (end < 0 or c.position < end)]

    def _check_open(self, what: str) -> None:
        if self._decoding and what != "decode":
            self.violations.append(f"{what} during a decode")
        if self.closed:
            self.violations.append(f"{what} after close")
            raise AssertionError(f"{what} after close")
        if self.lost is not None:
            raise MemberLost(self.lost)
