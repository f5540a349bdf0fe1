"""Predicted outputs: text the answer is expected to repeat (OpenAI's ``prediction``: a file to
edit, a document to fix; the ensemble's own answer when the reserve member answers instead of
it), used to draft faster.

A drafter reads the prediction's tokens ahead in one batch (``ReadAhead``), then samples as
always: while each token it samples is the predicted one, the row after it is already there, no
decode of its own. When it samples another token that still spells the predicted text (the
prediction tokenized one way, the model writing it another), the rest is read ahead again from
there, in the batch that decodes that token anyway. When what it writes leaves the predicted
text, the rest of the batch's cells are dropped and drafting goes on one token at a time. The
rows come from llama.cpp's batched decode, whose logits differ from one-token decodes by a few
tenths of a logit (docs/performance.md): a near tie can go the other way, so the text is the
model's own, greedy or sampled, though not always the very text drafted without a prediction.
The prediction is followed while the answer written so far is its start (``predicted_rest``);
once they part, it is not read again.
"""

from __future__ import annotations

import numpy as np

from specem_local.backend.protocol import BatchRow, LanguageModel
from specem_local.engine.segments import incomplete_utf8_tail

AHEAD = 256  # the most characters of a prediction a draft reads ahead: far more than a segment's tokens


def predicted_rest(prediction: str, written: str) -> str:
    """What the prediction still says after the answer ``written`` so far ("" once they part)."""
    return prediction[len(written) :] if prediction.startswith(written) else ""


class ReadAhead:
    """A draft's prediction (``rest``: what it still says) read ahead on sequence 0 from position
    ``start``, where the draft begins, never past ``most`` tokens of it: ``next_row`` gives the
    row after each token the drafter samples."""

    def __init__(self, model: LanguageModel, rest: str, start: int, most: int) -> None:
        self.model, self.start, self.most = model, start, most
        self.text = rest[:AHEAD].encode("utf-8")
        self.said = b""  # what the draft has written so far
        self.drafted = 0  # tokens the draft has sampled
        self.tokens: list[int] = []  # predicted tokens read ahead and not yet drafted, in order
        self.rows: list[np.ndarray] = []  # the row after each of them
        self.read = self.used = 0  # predicted tokens read ahead; of them, those drafted as predicted
        if predicted := self.model.tokenize(rest[:AHEAD])[:most]:
            self._batch([], predicted)

    def next_row(self, token: int) -> np.ndarray | None:
        """The row after ``token``, the drafter's next, when the prediction said it, or when the
        text still follows the prediction (then read ahead again, ``token`` decoded in the same
        batch); else None, and the caller decodes ``token`` itself (once the text has left the
        prediction, for the rest of the draft)."""
        self.drafted += 1
        self.said += self.model.token_bytes(token)
        if self.tokens and self.tokens[0] == token:
            self.used += 1
            del self.tokens[0]
            return self.rows.pop(0)
        self.drop(self.drafted - 1)  # this token's position on: the prediction's cells out
        if not self.text.startswith(self.said):
            self.text = b""  # left for good
            return None
        if incomplete_utf8_tail(self.said):  # a character split between tokens: read again after it
            return None
        rest = self.model.tokenize(self.text[len(self.said) :].decode("utf-8"))[: self.most - self.drafted]
        return self._batch([token], rest)[0] if rest else None  # none left, or no room: the caller decodes it

    def _batch(self, first: list[int], predicted: list[int]) -> list[np.ndarray]:
        """Decode ``first`` (the token just drafted, if any) and the ``predicted`` tokens after it
        in one batch at the draft's next position; the rows after each, ``first``'s among them."""
        position = self.start + self.drafted - len(first)
        batch = [BatchRow(token, position + i, 0, True) for i, token in enumerate([*first, *predicted])]
        rows = list(self.model.decode(batch))
        self.tokens, self.rows, self.read = list(predicted), rows[len(first) :], self.read + len(predicted)
        return rows

    def drop(self, kept: int | None = None) -> None:
        """Drop the cells read ahead past the draft's first ``kept`` tokens (all it drafted,
        unless said): the draft ended, or the prediction missed."""
        if self.tokens:
            self.model.seq_remove(0, self.start + (self.drafted if kept is None else kept), -1)
            self.tokens, self.rows = [], []
