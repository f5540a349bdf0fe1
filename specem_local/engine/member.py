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

import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from specem_local.backend.protocol import BatchRow, ContextFull, LanguageModel, vocabulary_digest
from specem_local.backend.scoring import KEEP, end_score, mean_score
from specem_local.engine.drafted import Draft, Scored
from specem_local.engine.format_compiler import allowed_tokens
from specem_local.engine.prediction import ReadAhead
from specem_local.engine.prompting import PromptFormat
from specem_local.engine.sampling import Sampler
from specem_local.engine.segments import ends_at_word_boundary, incomplete_utf8_tail, trim_to_word_boundary
from specem_local.models.config import ModelSpec

EXTRA_TOKENS = 6  # drafting may run this far past L to finish a UTF-8 character or a word


class Member:
    """One model taking part: its spec, its model, and how it is prompted."""

    def __init__(self, spec: ModelSpec, model: LanguageModel, prompt_format: PromptFormat) -> None:
        self.spec = spec
        self.model = model
        self.prompt_format = prompt_format
        self.tokens: list[int] = []  # committed sequence 0
        self.last_row: np.ndarray | None = None
        self._draft: Draft | None = None  # this round's draft, while its tokens are in sequence 0
        self._unread: list[int] = []  # reading along: tokens of the draft not decoded yet
        self.matcher: Any = None  # a constrained answer: llguidance's matcher over this model's tokens
        self._consumed = 0  # tokens of this round's draft the matcher has taken
        self._prompt_cache: tuple[list[int], np.ndarray] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    # -- a new answer ---------------------------------------------------------------------------
    def start(self, prompt_tokens: list[int], reuse: bool = True) -> None:
        """Make sequence 0 hold exactly ``prompt_tokens``, reusing the cached common prefix
        (multi-turn chats do not re-decode their history) and dropping everything else.
        ``reuse`` false: the memory is cleared and the prompt decoded as a freshly loaded model
        would, cell for cell. llama.cpp's numbers depend on how a prompt is split into decode
        calls (small batches take other CPU kernels: Gemma's last logits move by up to 0.59
        when 16 prompt tokens are decoded as 5 + 11), so only then is a seeded answer the same
        whatever was asked before (docs/api.md)."""
        self._draft = None
        if not reuse:
            self.reset()
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
        self._draft = None
        self.last_row = None
        self._prompt_cache = None

    @property
    def drafted(self) -> int:
        """Tokens this round's draft added to sequence 0 after ``tokens``."""
        return len(self._draft.tokens) if self._draft is not None else 0

    @property
    def pending_draft(self) -> Draft | None:
        """This round's draft whose tokens sequence 0 holds past the committed prefix (its own,
        or the one it read along), if any."""
        return self._draft

    @functools.cached_property
    def vocabulary(self) -> str:
        """A fingerprint of this model's vocabulary (``model.vocabulary_digest``), found once."""
        return vocabulary_digest(self.model)

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
        on_token: Callable[[int], None] | None = None,
        predicted: str = "",
    ) -> Draft:
        """Sample ``tokens`` on sequence 0, then go on (a few tokens, never past ``at_most``)
        until the next token would start a new word, so the segment ends on a whole word and
        whole characters without throwing drafted tokens away. Then post-process: this model's
        stop strings, and a cut back to a word boundary if the extra tokens ran out.
        ``ignore_eos`` resamples instead of ending at an end-of-generation token, and does not
        end at the template's end-of-turn text either (benchmarks of fixed answer length).
        ``on_token`` sees every token the draft decodes, in order (members reading along).
        ``predicted``: the text a prediction expects next, read ahead in batches
        (``prediction.py``: fewer decodes)."""
        started = time.perf_counter()
        assert self.last_row is not None
        start = len(self.tokens)
        if self._draft is not None:  # a second draft this round (draft_budget): drop the first's cells
            self.model.seq_remove(0, start, -1)
            self._draft = None
        if self.matcher is not None:
            self.matcher.rollback(self._consumed)
            self._consumed = 0
        rows = [self.last_row]
        drafted: list[int] = []
        data = b""
        ended = at_boundary = False
        limit = min(tokens + EXTRA_TOKENS, self.room - 1)
        if at_most is not None:
            limit = min(limit, at_most)
        ahead = ReadAhead(self.model, predicted, start, limit) if predicted and limit > 0 else None
        while len(drafted) < limit and not cancel.is_set():
            row = rows[-1]
            if self.matcher is not None:  # a constrained answer: only what the matcher allows
                allowed = allowed_tokens(self.matcher, len(row))
                if not allowed.any():
                    break
                row = np.where(allowed, row, -np.inf)
            token = sampler(row)
            if ignore_eos and self.matcher is None:
                token = _resample_past_eog(self.model, sampler, row, token)
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
            if self.matcher is not None:
                self.matcher.consume_token(token)
                self._consumed += 1
            data += piece
            after = ahead.next_row(token) if ahead is not None else None
            if after is None:
                after = self.model.decode([BatchRow(token, start + len(drafted) - 1, 0, True)])[0]
            rows.append(after)
            if on_token is not None:
                on_token(token)
        if ahead is not None:
            ahead.drop()
        decoded = list(drafted)
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
        seconds = time.perf_counter() - started
        read = (ahead.used, ahead.read) if ahead is not None else (0, 0)
        self._draft = Draft(text, ended, text_tokens, rows, seconds, decoded, predicted=read)
        return self._draft

    # -- reading along (token-level contrast) ---------------------------------------------------
    def begin_reading(self) -> None:
        """Start reading another member's draft token by token (a member of the same
        vocabulary): sequence 0 drops this round's earlier tail and follows the new draft."""
        assert self.last_row is not None
        if self._draft is not None:
            self.model.seq_remove(0, len(self.tokens), -1)
        self._draft = Draft("", False, [], [self.last_row])
        self._unread = []

    def read(self, token: int) -> None:
        """The draft's next token. It is decoded when a row is next needed, together with any
        others read since: where the drafter was sure of a token no contrast is needed, so the
        reader catches up in one batch instead of one decode per token."""
        assert self._draft is not None
        self._draft.tokens.append(token)
        self._unread.append(token)

    @property
    def read_row(self) -> np.ndarray:
        """The logits after the tokens read so far: this model's view of the draft's next token."""
        self._catch_up()
        assert self._draft is not None
        return self._draft.rows[-1]

    def _catch_up(self) -> None:
        assert self._draft is not None
        if self._unread:
            start = len(self.tokens) + len(self._draft.tokens) - len(self._unread)
            rows = self.model.decode([BatchRow(t, start + i, 0, True) for i, t in enumerate(self._unread)])
            self._draft.rows.extend(rows)
            self._unread = []

    def end_reading(self, draft: Draft) -> None:
        """The draft read along is done: sequence 0 holds its tokens, so this member holds the
        same candidate (its cells are kept if it wins, and scoring it costs no decode)."""
        self._catch_up()
        assert self._draft is not None and self._draft.tokens == draft.tokens
        self._draft = dataclasses.replace(
            draft, rows=self._draft.rows, tokens=list(draft.tokens), seconds=0.0, contrast_changed=None
        )

    def own_score(self, draft: Draft, scoring: str, with_end: bool = False) -> float:
        """Score this model's own aligned draft from the logits it drafted with (no decode);
        ``with_end`` also scores ending the answer after it."""
        assert draft.text_tokens is not None
        end = draft.end(len(draft.text_tokens), self.model.eog_tokens, scoring) if with_end else None
        return mean_score(*draft.scores(draft.text_tokens, scoring), scoring, end)

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
        scored = Scored(tokenized, {}, {}, {})
        items = list(enumerate(tokenized.items(), start=1))
        for seq_id, index, score, after in self._decode_candidates(items, scoring, ending):
            scored.seq_of[index] = seq_id
            scored.scores[index] = score
            scored.last_rows[index] = after
        return scored

    def _score_one_at_a_time(self, tokenized: dict[int, list[int]], scoring: str, ending: frozenset[int]) -> Scored:
        """Each candidate in sequence 1, its tail removed after scoring: it needs room for one
        tail only. The winner is decoded again when it is committed."""
        scores: dict[int, float] = {}
        for item in tokenized.items():
            try:
                [(_, index, score, _)] = self._decode_candidates([(1, item)], scoring, ending)
            finally:
                self.model.seq_remove(1, -1, -1)
            scores[index] = score
        return Scored(tokenized, scores, {}, {})

    def _decode_candidates(
        self, items: list[tuple[int, tuple[int, list[int]]]], scoring: str, ending: frozenset[int]
    ) -> list[tuple[int, int, float, np.ndarray]]:
        """Score candidates ``(seq_id, (index, tokens))`` in one decode, each in its sequence on
        top of the committed prefix. A candidate's leading tokens that this model drafted this
        round are not decoded again: its sequence shares those cells of sequence 0, and their
        scores come from the drafting rows. Returns ``(seq_id, index, score, row after it)``."""
        assert self.last_row is not None
        own = self._draft or Draft("", False, [], [self.last_row])  # what sequence 0 holds past the prefix
        prefix = len(self.tokens)
        batch: list[BatchRow] = []
        targets: list[int] = []
        plans = []
        for seq_id, (index, tokens) in items:
            shared = _common_prefix(tokens, own.tokens)
            self.model.seq_remove(seq_id, -1, -1)  # a sequence left over from an earlier scoring
            self.model.seq_copy(0, seq_id, 0, prefix + shared)
            plans.append((seq_id, index, tokens, shared, len(targets)))
            tail = tokens[shared:]
            batch += [BatchRow(t, prefix + shared + i, seq_id, True) for i, t in enumerate(tail)]
            targets += [*tail[1:], KEEP] if tail else []
        decoded = self.model.decode_scores(batch, targets, normalise=scoring == "logprob") if batch else None
        results = []
        for seq_id, index, tokens, shared, offset in plans:
            head = min(shared + 1, len(tokens))  # tokens whose predicting row was drafted
            chosen, normalisers = own.scores(tokens[:head], scoring)
            if shared == len(tokens):
                after = own.rows[shared]
                end = own.end(shared, self.model.eog_tokens, scoring) if index in ending else None
            else:
                assert decoded is not None
                last = offset + len(tokens) - shared - 1  # the kept row after the candidate
                chosen = np.concatenate([chosen, decoded.chosen[offset:last]])
                normalisers = np.concatenate([normalisers, decoded.normalisers[offset:last]])
                after = decoded.kept[last]
                normaliser = float(decoded.normalisers[last]) if scoring == "logprob" else None
                end = end_score(after, self.model.eog_tokens, scoring, normaliser) if index in ending else None
            results.append((seq_id, index, mean_score(chosen, normalisers, scoring, end), after))
        return results

    # -- commit ---------------------------------------------------------------------------------
    def commit(self, winner: int, text: str, own: Draft | None, scored: Scored | None) -> int:
        """Make the winning segment part of sequence 0; return how many tokens it added here.

        Own aligned draft: keep its cells. Scored in-line: adopt the winner's sequence (seq_rm
        our draft tail, seq_cp winner -> 0, seq_keep 0). Otherwise decode it. Under a
        constraint, the matcher drops what the draft consumed and takes the winner's tokens."""
        prefix = len(self.tokens)
        self._draft = None
        if own is not None and own.text_tokens is not None:
            added = own.text_tokens
            self.model.seq_remove(0, prefix + len(added), -1)
            self.model.seq_keep(0)
            self.last_row = own.rows[len(added)]
        elif scored is not None and winner in scored.seq_of:
            self.model.seq_remove(0, prefix, -1)
            self.model.seq_copy(scored.seq_of[winner], 0, -1, -1)
            self.model.seq_keep(0)
            added = scored.candidate_tokens[winner]
            self.last_row = scored.last_rows[winner]
        else:
            self.model.seq_remove(0, prefix, -1)
            self.model.seq_keep(0)
            added = self.model.tokenize(text)
            rows = self.model.decode([BatchRow(t, prefix + i, 0, i == len(added) - 1) for i, t in enumerate(added)])
            self.last_row = rows[-1]
        self.tokens += added
        if self.matcher is not None:
            self.matcher.rollback(self._consumed)
            self.matcher.consume_tokens(list(added))
            self._consumed = 0
        return len(added)


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


def _common_prefix(tokens: list[int], other: list[int]) -> int:
    """How many leading tokens two token lists share."""
    count = 0
    for a, b in zip(tokens, other):
        if a != b:
            break
        count += 1
    return count


def _aligned_prefix(model: LanguageModel, tokens: list[int], target: bytes) -> int | None:
    """How many leading tokens spell exactly ``target``, or None if no prefix does."""
    data = b""
    for count, token in enumerate(tokens):
        if data == target:
            return count
        data += model.token_bytes(token)
    return len(tokens) if data == target else None
