"""The paid check of an answer's confidence (``confidence_check``, issue 55): after the answer,
more answers to the same question from the same members (each other member alone: the
witnesses; or the heaviest member sampled again: the samples), and the share whose final answer
is the answer's own (``evidence.final_answer``) becomes the ``witnesses`` evidence the
calibrator fitted for that check reads. An answer whose reasoning came first, or that was cut
short by a cancel, is not checked."""

from __future__ import annotations

import dataclasses

import numpy as np

from specem_local.engine.evidence import answer_agreement, final_answer
from specem_local.engine.learned import StartingWeights
from specem_local.engine.member import Member
from specem_local.engine.request import AnswerRequest
from specem_local.engine.thinking import ThinkPlan
from specem_local.events import FinalEvent

CHECKED = ("eos", "length", "stop")  # answers that came to an end of their own, or a limit's


def check_requests(request: AnswerRequest, members: list[Member], final: FinalEvent) -> list[AnswerRequest]:
    """The answers that check ``final``: one request each, of one member alone (plain generation
    from the prompt it already has); none when the answer is not to be checked."""
    settings = request.settings
    if settings.confidence_check == "none" or final.finish_reason not in CHECKED or request.think.budget:
        return []
    drafters = [m for m in members if m.spec.drafts]
    if settings.confidence_check == "witnesses":
        writer = max(final.wins, key=lambda name: final.wins[name]) if final.wins else None
        chosen = [(m, settings) for m in drafters if m.name != writer]
    else:
        heaviest = max(drafters, key=lambda m: m.model.n_params)
        chosen = [(heaviest, dataclasses.replace(settings, greedy=False, seed=settings.seed + 1 + k))
                  for k in range(settings.check_samples)]  # fmt: skip
    return [
        dataclasses.replace(
            request, members=(member,), settings=dataclasses.replace(chosen_settings, confidence_check="none"),
            prompts={member.name: request.prompts[member.name]}, think=ThinkPlan(0),
            start=StartingWeights(np.ones(1)),
        )
        for member, chosen_settings in chosen
    ]  # fmt: skip


def with_check(final: FinalEvent, checks: list[FinalEvent], request: AnswerRequest) -> FinalEvent:
    """``final`` with the share of ``checks`` that agree with it as its ``witnesses`` evidence,
    and its confidence read again by the calibrator fitted for the check."""
    calibrator = request.calibrator
    if not checks or calibrator is None or final.confidence is None:
        return final
    own = final_answer(final.text)
    agreement = sum(answer_agreement(own, final_answer(check.text)) for check in checks) / len(checks)
    evidence = {**final.evidence, "witnesses": agreement}
    confidence = calibrator.probability(evidence)
    spent = sum(check.seconds for check in checks)
    return dataclasses.replace(final, evidence=evidence, confidence=confidence, seconds=final.seconds + spent,
                               unsure=confidence < request.settings.abstain_below)  # fmt: skip
