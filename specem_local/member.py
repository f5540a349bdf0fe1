"""One model's part in the ensemble: its committed sequence, drafting, in-line scoring of
other models' candidates, and committing the winner.

KV layout per model (unified cache): sequence 0 holds the committed context (prompt and
answer so far) at positions ``0..P-1``; ``last_row`` holds the logits that predict position
``P``. Drafting extends sequence 0 in place. Scoring copies the prefix to sequences 1..n (a
cheap cell-sharing copy), puts candidate ``j``'s tokens in sequence ``j+1`` at ``P, P+1, ...``,
and decodes them all in one batch. Committing adopts the winner's cells (no re-decode).
When the candidates' tails do not fit in the free cells (near the end of the context), they
are scored one at a time instead, each tail dropped after it is scored.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from specem_local.config import ModelSpec
from specem_local.model import BatchRow, ContextFull, LanguageModel
from specem_local.prompting import PromptFormat
from specem_local.sampling import Sampler
from specem_local.segments import ends_at_word_boundary, incomplete_utf8_tail, trim_to_word_boundary

EXTRA_TOKENS = 6  # drafting may run this far past L to finish a UTF-8 character or a word


def token_scores(rows: np.ndarray, tokens: list[int], scoring: str) -> np.ndarray:
    """Per token: the logit (``logit``) or log-probability (``logprob``) that ``rows[i]``
    gives ``tokens[i]``."""
    picked = rows[np.arange(len(tokens)), tokens].astype(np.float64)
    return picked - _log_normalisers(rows) if scoring == "logprob" else picked


def end_score(row: np.ndarray, end_tokens: np.ndarray, scoring: str) -> float:
    """How strongly ``row`` predicts that the answer ends here: the log-probability of any
    end-of-generation token (``logprob``), or the highest such raw logit (``logit``)."""
    ends = row[end_tokens].astype(np.float64)
    if scoring == "logit":
        return float(ends.max())
    return float(_log_normalisers(ends[None, :])[0] - _log_normalisers(row[None, :])[0])


def _log_normalisers(rows: np.ndarray) -> np.ndarray:
    """``log Σ exp`` of each row (shifted by its maximum; summed in float64)."""
    top = rows.max(axis=1, keepdims=True)
    return np.log(np.exp(rows - top).sum(axis=1, dtype=np.float64)) + top[:, 0]


def segment_score(
    rows: np.ndarray, tokens: list[int], scoring: str, end: tuple[np.ndarray, np.ndarray] | None = None
) -> float:
    """Mean of the token scores; ``end`` = (the row after the last token, the end tokens)
    counts the end of the answer as one more token, for a candidate that ends it."""
    values = token_scores(rows, tokens, scoring)
    if end is not None:
        values = np.append(values, end_score(end[0], end[1], scoring))
    return float(values.mean())


@dataclass
class Draft:
    """A drafted segment after post-processing."""

    text: str
    ended: bool
    text_tokens: list[int] | None  # the leading drafted tokens that spell ``text`` exactly, or None
    rows: list[np.ndarray] = field(repr=False)  # rows[i] predicted drafted token i; one more at the end
    seconds: float = 0.0

    @property
    def sampled(self) -> int:
        """Tokens decoded while drafting (before any trimming)."""
        return len(self.rows) - 1

    @property
    def aligned(self) -> bool:
        """Whether ``text`` is exactly some leading drafted tokens (whose cells can be kept)."""
        return self.text_tokens is not None


@dataclass
class Scored:
    """A verifier's in-line scores for a set of candidates, kept until the winner is known."""

    candidate_tokens: dict[int, list[int]]  # candidate index -> this model's tokens
    scores: dict[int, float]
    seq_of: dict[int, int]  # candidate index -> sequence id holding its cells
    last_rows: dict[int, np.ndarray]  # candidate index -> logits after its last token
    seconds: float = 0.0


class Member:
    """One model taking part: its spec, its model, and how it is prompted."""

    def __init__(self, spec: ModelSpec, model: LanguageModel, prompt_format: PromptFormat) -> None:
        self.spec = spec
        self.model = model
        self.prompt_format = prompt_format
        self.tokens: list[int] = []  # committed sequence 0
        self.last_row: np.ndarray | None = None
        self.drafted = 0  # tokens this round's draft added to sequence 0 after ``tokens``
        self._prompt_cache: tuple[list[int], np.ndarray] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    # -- a new answer ---------------------------------------------------------------------------
    def start(self, prompt_tokens: list[int]) -> None:
        """Make sequence 0 hold exactly ``prompt_tokens``, reusing the cached common prefix
        (multi-turn chats do not re-decode their history) and dropping everything else."""
        self.drafted = 0
        if self._prompt_cache is not None and self._prompt_cache[0] == prompt_tokens:
            self.model.seq_remove(-1, len(prompt_tokens), -1)
            self.tokens = list(prompt_tokens)
            self.last_row = self._prompt_cache[1]
            return
        common = 0
        for old, new in zip(self.tokens, prompt_tokens):
            if old != new:
                break
            common += 1
        common = min(common, len(prompt_tokens) - 1)  # decode at least one token for its row
        self.model.seq_remove(-1, common, -1)
        rest = prompt_tokens[common:]
        rows = self.model.decode([BatchRow(t, common + i, 0, i == len(rest) - 1) for i, t in enumerate(rest)])
        self.tokens = list(prompt_tokens)
        self.last_row = rows[-1]
        self._prompt_cache = (list(prompt_tokens), self.last_row)

    def reset(self) -> None:
        """Forget everything: an empty KV cache and no cached prompt."""
        self.model.clear()
        self.tokens = []
        self.drafted = 0
        self.last_row = None
        self._prompt_cache = None

    @property
    def room(self) -> int:
        """KV cells not used by the committed sequence."""
        return self.model.n_ctx - len(self.tokens)

    # -- drafting -------------------------------------------------------------------------------
    def draft(
        self,
        tokens: int,
        sampler: Sampler,
        cancel: threading.Event,
        *,
        at_most: int | None = None,
        ignore_eos: bool = False,
    ) -> Draft:
        """Sample ``tokens`` on sequence 0, then go on (a few tokens, never past ``at_most``)
        until the next token would start a new word, so the segment ends on a whole word and
        whole characters without throwing drafted tokens away. Then post-process: this model's
        stop strings, and a cut back to a word boundary if the extra tokens ran out.
        ``ignore_eos`` resamples instead of ending at an end-of-generation token, and does not
        end at the template's end-of-turn text either (benchmarks of fixed answer length)."""
        started = time.perf_counter()
        assert self.last_row is not None
        start = len(self.tokens)
        rows = [self.last_row]
        drafted: list[int] = []
        data = b""
        ended = at_boundary = False
        limit = min(tokens + EXTRA_TOKENS, self.room - 1)
        if at_most is not None:
            limit = min(limit, at_most)
        while len(drafted) < limit and not cancel.is_set():
            token = sampler(rows[-1])
            if ignore_eos:
                token = _resample_past_eog(self.model, sampler, rows[-1], token)
            if self.model.is_eog(token):
                ended = True
                break
            piece = self.model.token_bytes(token)
            if (
                len(drafted) >= tokens
                and incomplete_utf8_tail(data) == 0
                and ends_at_word_boundary(data.decode("utf-8", errors="replace"), piece)
            ):
                at_boundary = True  # the next segment starts with this token, not decoded here
                break
            drafted.append(token)
            data += piece
            rows.append(self.model.decode([BatchRow(token, start + len(drafted) - 1, 0, True)])[0])
            self.drafted = len(drafted)
        while incomplete_utf8_tail(data):  # still unfinished: drop the partial character
            ended = False
            data = data[: len(data) - len(self.model.token_bytes(drafted.pop()))]
        text = data.decode("utf-8", errors="replace")
        for stop in () if ignore_eos else self.prompt_format.stop_strings:  # a template's end of turn
            index = text.find(stop)
            if index >= 0:
                text, ended = text[:index].rstrip(), True
        if not ended and not at_boundary:
            text = trim_to_word_boundary(text)
        kept = _aligned_prefix(self.model, drafted, text.encode("utf-8"))
        text_tokens = drafted[:kept] if kept is not None else None
        return Draft(text, ended, text_tokens, rows, time.perf_counter() - started)

    def own_score(self, draft: Draft, scoring: str, with_end: bool = False) -> float:
        """Score this model's own aligned draft from the logits it drafted with (no decode);
        ``with_end`` also scores ending the answer after it."""
        assert draft.text_tokens is not None
        count = len(draft.text_tokens)
        end = (draft.rows[count], self.model.eog_tokens) if with_end else None
        return segment_score(np.stack(draft.rows[:count]), draft.text_tokens, scoring, end)

    # -- verification ---------------------------------------------------------------------------
    def score(self, candidates: dict[int, str], scoring: str, ending: frozenset[int] = frozenset()) -> Scored:
        """Score every candidate text, each in its own sequence on top of the shared committed
        prefix: in one batched decode when their tails fit in the free KV cells and sequences,
        else one at a time. Candidates in ``ending`` end the answer, and ending it there is
        scored too."""
        started = time.perf_counter()
        tokenized = {index: self.model.tokenize(text) for index, text in candidates.items()}
        free = self.room - self.drafted
        fits = sum(map(len, tokenized.values())) <= free and len(tokenized) < self.model.n_seq_max
        scored = None
        if fits:
            try:
                scored = self._score_batch(tokenized, scoring, ending)
            except ContextFull:  # the free cells were not where the batch needed them
                for seq_id in range(1, len(tokenized) + 1):
                    self.model.seq_remove(seq_id, -1, -1)
        if scored is None:
            scored = self._score_one_at_a_time(tokenized, scoring, ending)
        scored.seconds = time.perf_counter() - started
        return scored

    def _score_batch(self, tokenized: dict[int, list[int]], scoring: str, ending: frozenset[int]) -> Scored:
        assert self.last_row is not None
        prefix = len(self.tokens)
        batch: list[BatchRow] = []
        seq_of: dict[int, int] = {}
        for seq_id, (index, tokens) in enumerate(tokenized.items(), start=1):
            seq_of[index] = seq_id
            self.model.seq_remove(seq_id, -1, -1)  # a sequence left over from an earlier scoring
            self.model.seq_copy(0, seq_id, 0, prefix)
            batch += [BatchRow(t, prefix + i, seq_id, True) for i, t in enumerate(tokens)]
        rows = self.model.decode(batch)
        scores: dict[int, float] = {}
        last_rows: dict[int, np.ndarray] = {}
        offset = 0
        for index, tokens in tokenized.items():
            own_rows = rows[offset : offset + len(tokens)]
            scores[index] = self._candidate_score(own_rows, tokens, scoring, index in ending)
            last_rows[index] = own_rows[-1].copy()
            offset += len(tokens)
        return Scored(tokenized, scores, seq_of, last_rows)

    def _score_one_at_a_time(self, tokenized: dict[int, list[int]], scoring: str, ending: frozenset[int]) -> Scored:
        """Each candidate in sequence 1, its tail removed after scoring: it needs room for one
        tail only. The winner is decoded again when it is committed."""
        prefix = len(self.tokens)
        scores: dict[int, float] = {}
        for index, tokens in tokenized.items():
            self.model.seq_remove(1, -1, -1)
            self.model.seq_copy(0, 1, 0, prefix)
            try:
                rows = self.model.decode([BatchRow(t, prefix + i, 1, True) for i, t in enumerate(tokens)])
            finally:
                self.model.seq_remove(1, -1, -1)
            scores[index] = self._candidate_score(rows, tokens, scoring, index in ending)
        return Scored(tokenized, scores, {}, {})

    def _candidate_score(self, rows: np.ndarray, tokens: list[int], scoring: str, ends: bool) -> float:
        """A candidate's score from the rows decoded after each of its tokens."""
        assert self.last_row is not None
        predicting = np.concatenate([self.last_row[None, :], rows[:-1]])
        end = (rows[-1], self.model.eog_tokens) if ends else None
        return segment_score(predicting, tokens, scoring, end)

    # -- commit ---------------------------------------------------------------------------------
    def commit(self, winner: int, text: str, own: Draft | None, scored: Scored | None) -> int:
        """Make the winning segment part of sequence 0; return how many tokens it added here.

        Own aligned draft: keep its cells. Scored in-line: adopt the winner's sequence (seq_rm
        our draft tail, seq_cp winner -> 0, seq_keep 0). Otherwise decode it."""
        prefix = len(self.tokens)
        self.drafted = 0
        if own is not None and own.text_tokens is not None:
            kept = len(own.text_tokens)
            self.model.seq_remove(0, prefix + kept, -1)
            self.model.seq_keep(0)
            self.tokens += own.text_tokens
            self.last_row = own.rows[kept]
            return kept
        self.model.seq_remove(0, prefix, -1)
        if scored is not None and winner in scored.seq_of:
            self.model.seq_copy(scored.seq_of[winner], 0, -1, -1)
            self.model.seq_keep(0)
            tokens = scored.candidate_tokens[winner]
            self.tokens += tokens
            self.last_row = scored.last_rows[winner]
            return len(tokens)
        self.model.seq_keep(0)
        tokens = self.model.tokenize(text)
        rows = self.model.decode([BatchRow(t, prefix + i, 0, i == len(tokens) - 1) for i, t in enumerate(tokens)])
        self.tokens += tokens
        self.last_row = rows[-1]
        return len(tokens)


def can_draft_and_verify(members: list[Member]) -> bool:
    """Whether some member drafts and some member verifies: what a round needs."""
    return any(m.spec.drafts for m in members) and any(m.spec.verifies for m in members)


def _resample_past_eog(model: LanguageModel, sampler: Sampler, row: np.ndarray, token: int) -> int:
    """Sample again from ``row`` with every end-of-generation token drawn so far masked out."""
    masked = row
    while model.is_eog(token):
        masked = masked.copy()
        masked[token] = -np.inf
        token = sampler(masked)
    return token


def _aligned_prefix(model: LanguageModel, tokens: list[int], target: bytes) -> int | None:
    """How many leading tokens spell exactly ``target``, or None if no prefix does."""
    data = b""
    for count, token in enumerate(tokens):
        if data == target:
            return count
        data += model.token_bytes(token)
    return len(tokens) if data == target else None
