"""The event stream every front end consumes: a ``StartEvent``, one ``RoundEvent`` per round,
then a ``FinalEvent``. Small frozen records; ``to_dict()`` and ``event_from_dict`` turn them
into JSON-ready dicts and back (the CLI's ``--json``, saved chats)."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

# The closed sets the events speak in (their JSON keeps these strings).
Decision = Literal["vote", "contrast", "fast-finish", "only-candidate", "confident", "picked", "forced", "options"]
FinishReason = Literal["eos", "length", "stop", "context", "cancelled", "empty"]
WeightsOrigin = Literal["prior", "carried", "calibrated", "built-in", "task", "uniform"]  # the last two: options
Phase = Literal["reasoning", "answer"]  # an answer with a format thinks first, then writes the format
Switch = Literal["eos", "budget"]  # why its reasoning ended: the members ended it, or its budget ran out


class _Record:
    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-ready data."""
        return json_ready(dataclasses.asdict(self))  # type: ignore[call-overload]


def json_ready(value: Any) -> Any:
    """``value`` with NaN and infinities as None: JSON has no such numbers, and Python's
    ``json`` would write a bare ``NaN`` that other readers reject."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(json_ready(item) for item in value)
    return value


@dataclass(frozen=True)
class TokenLogprob:
    """One token of the answer as its author drafted it: its text and bytes, its log-probability
    in the author's own distribution, and the most likely tokens there (``top``: each one's
    text, log-probability and bytes, which the text alone cannot give for part of a character)."""

    token: str
    logprob: float
    bytes: tuple[int, ...]
    top: tuple[tuple[str, float, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class Candidate:
    """One model's draft in a round and what every verifier thought of it."""

    model: str
    text: str
    ended: bool  # the drafter ended the answer with this segment
    scores: dict[str, float]  # verifier -> raw score (mean logit or mean log-probability)
    shares: dict[str, float]  # verifier -> normalised score (its row sums to 1)
    combined: float | None  # weighted vote; None when no vote was needed
    same_as: str | None = None  # drafted the same text as this model (scored once, as one candidate)
    copied: float | None = None  # share of its words that repeat the answer so far (with loop_guard)
    sample: int = 0  # which of its model's drafts this round (draft_budget: 1, 2... are extra drafts)
    same_as_sample: int | None = None  # with same_as: which of that model's drafts
    contrasted_with: tuple[str, ...] = ()  # token-level contrast: the amateurs it was drafted against
    contrast_changed: int | None = None  # ... and on how many of its tokens that changed the top choice
    option: bool = (
        False  # one of the options of an answer among options: named by its text; ``model`` argued most for it
    )


@dataclass(frozen=True)
class StartEvent(_Record):
    """An answer begins: who takes part and the weights the vote starts from."""

    models: tuple[str, ...]  # the models taking part
    drafters: tuple[str, ...]  # those that draft (model exit may leave out ones known to lose)
    weights: dict[str, float]  # starting weight of each verifier
    prompt_tokens: dict[str, int]  # the conversation's length in each model's tokens
    plain_generation: bool  # one model: no ensembling takes place
    weights_from: WeightsOrigin = "prior"  # the prior, carried (from earlier answers), calibrated or built-in
    learned_answers: int = 0  # answers the carried weights were learned from
    calibrated_items: int = 0  # labelled items they were calibrated on
    choices: int = 0  # the user's choices (picks, thumbs, comparisons) in them
    absent: dict[str, str] = dataclasses.field(default_factory=dict)  # lost members not back: name -> why
    notes: tuple[str, ...] = ()  # what the answer's format serves only approximately, in words
    type: str = "start"

    @property
    def weights_origin(self) -> str:
        """Where the starting weights came from, in words."""
        return origin_words(self.weights_from, self.learned_answers, self.calibrated_items, self.choices)


@dataclass(frozen=True)
class RoundEvent(_Record):
    index: int  # 1-based round number
    text: str  # the winning segment, appended to the answer
    author: str  # the model that wrote the segment; "" for text a constraint forced ("forced")
    decision: Decision  # why it won, in words: vote.DECISIONS
    candidates: tuple[Candidate, ...]
    weights: dict[str, float]  # verifier weights after this round's update
    drafters: tuple[str, ...]  # models that drafted this round
    draft_seconds: dict[str, float]
    draft_tokens: dict[str, int]  # tokens each drafter sampled this round (for its tok/s)
    verify_seconds: dict[str, float]
    seconds: float
    answer_tokens: int  # answer length so far, in the authors' tokens
    runner_up: str | None = None  # the best other candidate in the vote
    ranked_first_by: tuple[str, ...] = ()  # verifiers that gave the winner their highest share
    discounted: str | None = None  # the loop guard kept this candidate from winning
    confidence: float | None = None  # with vote_gate: the leading draft's least token probability
    lost: dict[str, str] = dataclasses.field(default_factory=dict)  # members lost since the last event: name -> why
    phase: Phase = "answer"  # "reasoning": thought before the format (not part of the answer's text)
    sure: float | None = None  # how sure this segment is, as the answer's calibrator reads its evidence alone
    least_probability: float | None = None  # the author's least token probability in the segment
    margin: float | None = None  # a voted round: the winner's lead over the runner-up in the weighted vote
    agreement: float | None = None  # a voted round: the share of verifiers that ranked the winner first
    logprobs: tuple[TokenLogprob, ...] = ()  # each token of the segment, when asked (``logprobs``)
    type: str = "round"


@dataclass(frozen=True)
class FinalEvent(_Record):
    text: str
    finish_reason: FinishReason
    rounds: int
    tokens: int
    seconds: float
    first_segment_seconds: float | None
    wins: dict[str, int]
    drafters_per_round: float  # mean number of models that drafted a round (model exit lowers it)
    weights: dict[str, float]
    plain_generation: bool  # one model: no ensembling took place
    confident_rounds: int = 0  # rounds the vote gate took unvoted
    drafted_tokens: int = 0  # tokens decoded while drafting: every candidate, and members reading along
    contrast_changed: int = 0  # token-level contrast: tokens of the answer whose top choice it changed
    lost: dict[str, str] = dataclasses.field(default_factory=dict)  # members lost in this answer: name -> why
    reasoning: str = ""  # what was thought before the format (``text`` is the answer alone)
    reasoning_tokens: int = 0  # of ``tokens``
    switched: Switch | None = None  # why the reasoning ended; None: there was none, or it never ended
    confidence: float | None = None  # the probability that the answer is right (calibrated: ``confidence_from``)
    confidence_from: str = ""  # what the calibrator was fitted on, in words
    evidence: dict[str, float] = dataclasses.field(default_factory=dict)  # what it was read from (evidence.FEATURES)
    unsure: bool = False  # confidence below ``abstain_below``: the answer is given, marked unsure
    escalated: str = ""  # the reserve member that answered instead, the ensemble being unsure (``escalate_below``)
    ensemble_text: str = ""  # when escalated: the ensemble's own answer, kept
    stop_sequence: str = ""  # the stop string that ended the answer (finish "stop"; cut before it)
    predicted_tokens: int = 0  # with a prediction: its tokens drafted as predicted (no decode of their own)
    unpredicted_tokens: int = 0  # with a prediction: its tokens read ahead and not drafted (decoded for nothing)
    type: str = "final"
    # A constrained answer as a program reads it (the JSON value, a pydantic instance): not kept
    # in records, where ``text`` is.
    parsed: Any = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        record = {**super().to_dict(), "tokens_per_second": round(self.tokens_per_second, 3)}
        record.pop("parsed")
        return record


def finish_note(final: FinalEvent) -> str | None:
    """Why an answer stopped, in words, when a reader would otherwise be left guessing."""
    if final.finish_reason == "context":
        return "stopped: the context is full; raise n_ctx in models.toml or start a new chat"
    if not final.text and final.finish_reason in ("eos", "empty"):
        return "the models ended the answer without writing anything"
    return None


def member_news(event: StartEvent | RoundEvent | FinalEvent, said: set[str]) -> list[str]:
    """One line for each member that is out of the answer and not yet said to be (``said``
    keeps the names already said): every front end tells the user the same way."""
    if isinstance(event, StartEvent):
        out, verb = event.absent, "is out of this answer"
    elif isinstance(event, (RoundEvent, FinalEvent)):
        out, verb = event.lost, "left the answer"
    else:
        return []
    lines = [f"{name} {verb}: {why}" for name, why in out.items() if name not in said]
    said.update(out)
    return lines


def origin_words(weights_from: str, answers: int, items: int, choices: int = 0) -> str:
    """ "the prior", "carried over from 3 answers", "calibrated on 20 items, then 1 answer",
    "the built-in calibration (20 items)", "the built-in calibration (20 items) and 14 of your
    choices"."""
    learned = f"{answers} answer{'s' if answers != 1 else ''}"
    chosen = f" and {choices} of your choices" if choices else ""
    if weights_from == "built-in":
        return f"the built-in calibration ({items} items){chosen}"
    if weights_from == "calibrated":
        return f"calibrated on {items} items" + (f", then {learned}" if answers else "") + chosen
    if weights_from == "carried":
        return f"carried over from {learned}{chosen}"
    if weights_from == "task":  # an answer among options (docs/choices.md)
        return f"the task's weights, fitted on {items} labelled items" if items else "the task's weights (no labels)"
    if weights_from == "uniform":
        return "every source equally (no weights kept for the task)"
    return f"the prior{chosen}"


Event = StartEvent | RoundEvent | FinalEvent
EVENT_TYPES: dict[str, type] = {"start": StartEvent, "round": RoundEvent, "final": FinalEvent}


def event_from_dict(data: dict[str, Any]) -> Event:
    """An event from ``to_dict``'s output. Keys it does not know are ignored (written by a newer
    version); a missing or mistyped field is a ``ValueError``."""
    if not isinstance(data, dict) or not isinstance(data.get("type"), str) or data["type"] not in EVENT_TYPES:
        raise ValueError(f"not an event record: {str(data)[:60]}")
    return _record(EVENT_TYPES[data["type"]], data)


def _record(cls: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"a {cls.__name__} record must be an object, got {str(data)[:40]}")
    hints = typing.get_type_hints(cls)
    values = {}
    for field in dataclasses.fields(cls):
        if field.name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ValueError(f"{cls.__name__} record without {field.name!r}")
            continue
        value = data[field.name]
        if not _fits(value, hints[field.name]):
            raise ValueError(f"{cls.__name__} record: {field.name} = {str(value)[:40]} is not a {hints[field.name]}")
        if field.name == "candidates":
            value = tuple(_record(Candidate, item) for item in value)
        elif field.name == "logprobs":
            value = tuple(_token_logprob(item) for item in value)
        elif isinstance(value, list):
            value = tuple(value)
        values[field.name] = value
    return cls(**values)


def _token_logprob(data: Any) -> TokenLogprob:
    token = _record(TokenLogprob, data)
    try:
        top = tuple(_alternative(t) for t in token.top)
        return TokenLogprob(str(token.token), _logprob(token.logprob), tuple(_byte(b) for b in token.bytes), top)
    except (TypeError, OverflowError) as error:  # bytes that are no list, a number past a float
        raise ValueError(f"a token record is not one ({error})") from None


def _alternative(item: Any) -> tuple[str, float, tuple[int, ...]]:
    """One of a token's alternatives: [text, logprob, bytes] (before bytes were kept: [text, logprob])."""
    if not isinstance(item, (list, tuple)) or len(item) not in (2, 3) or not isinstance(item[0], str):
        raise ValueError(f"a token's alternative is [text, logprob, bytes], not {str(item)[:40]}")
    raw = item[2] if len(item) == 3 else item[0].encode("utf-8", "replace")
    return item[0], _logprob(item[1]), tuple(_byte(b) for b in raw)


def _logprob(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -math.inf < value < math.inf:
        raise ValueError(f"a log-probability is a finite number, not {str(value)[:40]}")
    return float(value)


def _byte(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
        raise ValueError(f"a token's bytes are numbers from 0 to 255, not {str(value)[:40]}")
    return value


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value can stand for a field of type ``hint`` (shallow: containers by kind)."""
    if typing.get_origin(hint) is Literal:
        return value in typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_fits(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint) or hint
    if origin is tuple:
        return isinstance(value, (list, tuple))
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin)
