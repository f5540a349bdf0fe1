"""Predicted outputs: text the answer is expected to repeat (OpenAI's ``prediction``: a file to
edit, a document to fix; the ensemble's own answer when the reserve member answers instead of
it), used to draft faster without changing a token of what is drafted.

A drafter reads its predicted tokens ahead in one batch (``ReadAhead``), then samples as always:
while each token it samples is the predicted one, the row after it is already there, no decode
needed; at the first that is not, the rest of the batch's cells are dropped and drafting goes on
one token at a time. The sampler sees the very rows it would have seen without the prediction,
so the text is the same, greedy or sampled; only the time changes (a prediction that is wrong
from its first token costs one batch decode). The prediction is followed while the answer
written so far is its start (``predicted_rest``); once they part, it is not read again.
"""

from __future__ import annotations

import numpy as np

from specem_local.backend.protocol import BatchRow, LanguageModel

AHEAD = 256  # the most characters of a prediction a draft reads ahead: far more than a segment's tokens


def predicted_rest(prediction: str, written: str) -> str:
    """What the prediction still says after the answer ``written`` so far ("" once they part)."""
    return prediction[len(written) :] if prediction.startswith(written) else ""


def ahead_tokens(model: LanguageModel, rest: str) -> list[int]:
    """The tokens ``model`` reads ahead from what the prediction still says (its start)."""
    return model.tokenize(rest[:AHEAD])


class ReadAhead:
    """A drafter's predicted ``tokens`` decoded ahead on sequence 0 from position ``start``
    (where its draft begins): ``next_row`` gives the row after each token it samples."""

    def __init__(self, model: LanguageModel, tokens: list[int], start: int) -> None:
        self.model, self.start, self.tokens = model, start, list(tokens)
        batch = [BatchRow(token, start + i, 0, True) for i, token in enumerate(tokens)]
        self.rows: list[np.ndarray] = list(model.decode(batch)) if batch else []
        self.read = len(self.tokens)  # predicted tokens decoded ahead
        self.used = 0  # of them, those the drafter sampled too, in order from the first

    def next_row(self, token: int) -> np.ndarray | None:
        """The row after ``token``, the drafter's next, when the prediction said it; else None
        (the caller decodes it itself) and the prediction is left from here on."""
        if self.used < len(self.tokens) and self.tokens[self.used] == token:
            self.used += 1
            return self.rows[self.used - 1]
        self.drop()
        return None

    def drop(self) -> None:
        """Drop the predicted cells past the tokens used (the draft ended, or the prediction
        missed): sequence 0 then holds the drafted tokens only."""
        if self.used < len(self.tokens):
            self.model.seq_remove(0, self.start + self.used, -1)
            del self.tokens[self.used :], self.rows[self.used :]
