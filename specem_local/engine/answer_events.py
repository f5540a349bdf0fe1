"""The events that open and close an answer (``StartEvent``, ``FinalEvent``), built from the
round loop's state (``rounds.py``): who answers and with what weights, then what was written,
what it cost and how sure it is. Plain functions over that state, so the loop keeps to rounds."""

from __future__ import annotations

import time

import numpy as np

from specem_local.engine.evidence import answer_confidence
from specem_local.engine.learned import StartingWeights
from specem_local.engine.member import Member
from specem_local.engine.phases import Reasoning, Writing
from specem_local.engine.request import AnswerRequest
from specem_local.engine.roster import Roster
from specem_local.engine.written import Written
from specem_local.events import FinalEvent, FinishReason, StartEvent


def weights_dict(members: list[Member], weights: np.ndarray) -> dict[str, float]:
    """The weights by member name, of the members that verify (the others never vote)."""
    return {m.name: float(w) for m, w in zip(members, weights) if m.spec.verifies}


def start_event(
    request: AnswerRequest,
    members: list[Member],
    roster: Roster,
    weights: np.ndarray,
    start: StartingWeights,
    absent: dict[str, str],
    prompts: list[list[int]],
) -> StartEvent:
    names = [m.name for m in members]
    return StartEvent(
        models=tuple(names),
        drafters=tuple(names[i] for i in roster.drafters),
        weights=weights_dict(members, weights),
        prompt_tokens={m.name: len(tokens) for m, tokens in zip(members, prompts)},
        plain_generation=len(members) == 1,
        weights_from=start.origin,
        learned_answers=start.answers,
        calibrated_items=start.items,
        choices=start.choices,
        absent=absent,
        notes=request.notes,
    )


def final_event(
    request: AnswerRequest,
    members: list[Member],
    roster: Roster,
    weights: np.ndarray,
    written: Written,
    phase: Writing | Reasoning,
    finish: FinishReason,
) -> FinalEvent:
    """The answer's final record, as it stands; its confidence (``evidence.answer_confidence``)
    none when it was cancelled."""
    answering = written.switched is not None or isinstance(phase, Writing)  # (a switch may find no room)
    contrast = roster.contrast
    confidence = {} if finish == "cancelled" else answer_confidence(
        request.calibrator, written.evidence, finish == "eos", written.tokens, request.settings.abstain_below
    )  # fmt: skip
    return FinalEvent(
        text=written.text if answering else "",
        finish_reason=finish,
        rounds=written.all_rounds,
        tokens=written.tokens,
        seconds=time.perf_counter() - written.started,
        first_segment_seconds=written.first_segment,
        wins=written.wins,
        drafters_per_round=written.drafters / written.rounds if written.rounds else 0.0,
        weights=weights_dict(members, weights),
        plain_generation=len(members) == 1,
        confident_rounds=written.confident_rounds,
        drafted_tokens=written.drafted_tokens + (contrast.read_tokens if contrast is not None else 0),
        contrast_changed=written.contrast_changed,
        lost={members[i].name: reason for i, reason in roster.lost.items()},
        reasoning=written.reasoning if answering else written.text,  # stopped while it thought: all reasoning
        reasoning_tokens=written.reasoning_tokens if answering else written.tokens,
        switched=written.switched,
        stop_sequence=written.stop_sequence,
        predicted_tokens=written.predicted,
        unpredicted_tokens=written.read_ahead - written.predicted,
        **confidence,
    )
