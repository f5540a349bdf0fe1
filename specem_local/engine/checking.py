"""What an answer's confidence pays for (issue 55). The paid check (``confidence_check``): after the answer,
more answers to the same question from the same members (each other member alone: the
witnesses; or the heaviest member sampled again: the samples), and the share whose final answer
is the answer's own (``evidence.final_answer``) becomes the ``witnesses`` evidence the
calibrator fitted for that check reads. An answer whose reasoning came first, or that was cut
short by a cancel, is not checked. Escalation (``escalate_below``): an answer less sure than the
setting is answered again by the reserve member alone, and that answer is given instead."""

from __future__ import annotations

import dataclasses

import numpy as np

from specem_local.engine.evidence import answer_agreement, final_answer
from specem_local.engine.formats import with_instruction
from specem_local.engine.learned import StartingWeights, confidence_calibrator
from specem_local.engine.member import Member
from specem_local.engine.request import AnswerRequest, prompt_tokens
from specem_local.engine.thinking import ThinkPlan
from specem_local.events import FinalEvent

CHECKED = ("eos", "length", "stop")  # answers that came to an end of their own, or a limit's
SEEDS = 1 << 64  # a sample's seed wraps round within the seed setting's range


def check_requests(request: AnswerRequest, members: list[Member], final: FinalEvent) -> list[AnswerRequest]:
    """The answers that check ``final``: one request each, of one member alone (plain generation
    from the prompt it already has, ``final`` its prediction: faster where it agrees, the same
    answer); none when the answer is not to be checked."""
    settings = request.settings
    if settings.confidence_check == "none" or final.finish_reason not in CHECKED or request.think.budget:
        return []
    drafters = [m for m in members if m.spec.drafts]
    if settings.confidence_check == "witnesses":
        writer = max(final.wins, key=lambda name: final.wins[name]) if final.wins else None
        greedy = dataclasses.replace(settings, greedy=True)  # what a witness would answer, not a sample of it
        chosen = [(m, greedy) for m in drafters if m.name != writer]
    else:
        heaviest = max(drafters, key=lambda m: m.model.n_params)
        chosen = [(heaviest, dataclasses.replace(settings, greedy=False, seed=(settings.seed + 1 + k) % SEEDS))
                  for k in range(settings.check_samples)]  # fmt: skip
    return [
        dataclasses.replace(
            request, members=(member,), settings=dataclasses.replace(chosen_settings, confidence_check="none"),
            prompts={member.name: request.prompts[member.name]}, think=ThinkPlan(0),
            start=StartingWeights(np.ones(1)), prediction=final.text,
        )
        for member, chosen_settings in chosen
    ]  # fmt: skip


def with_check(final: FinalEvent, checks: list[FinalEvent], request: AnswerRequest) -> FinalEvent:
    """``final`` with the share of ``checks`` that agree with it as its ``witnesses`` evidence,
    and its confidence read again by the calibrator fitted for the check."""
    calibrator = request.calibrator
    checks = [check for check in checks if check.finish_reason in CHECKED]  # a cancelled one says nothing
    if not checks or calibrator is None or final.confidence is None:
        return final
    own = final_answer(final.text)
    agreement = sum(answer_agreement(own, final_answer(check.text)) for check in checks) / len(checks)
    evidence = {**final.evidence, "witnesses": agreement}
    confidence = calibrator.probability(evidence)
    spent = sum(check.seconds for check in checks)
    return dataclasses.replace(final, evidence=evidence, confidence=confidence, seconds=final.seconds + spent,
                               unsure=confidence < request.settings.abstain_below)  # fmt: skip


def escalation_request(request: AnswerRequest, reserve: Member, final: FinalEvent) -> AnswerRequest | None:
    """The reserve member's request, when ``final`` is less sure than ``escalate_below`` (and
    came to an end or a limit); it answers alone, as a member of its own (its role is only to
    stand by), from the conversation as asked, in the answer's format, with the ensemble's
    answer as its prediction (``prediction.py``: where it would write the same, it drafts it
    faster; its answer is the one it would give without)."""
    settings = request.settings
    if final.confidence is None or final.confidence >= settings.escalate_below or final.finish_reason not in CHECKED:
        return None
    member = Member(dataclasses.replace(reserve.spec, role="both"), reserve.model, reserve.prompt_format)
    output_format = request.output_format
    asked = list(request.asked) or list(request.messages)
    messages = with_instruction(asked, output_format) if output_format is not None else asked
    tokens = prompt_tokens(member, messages, settings, 1, output_format is not None)
    quiet = dataclasses.replace(settings, confidence_check="none", escalate_below=0.0)
    own = confidence_calibrator([member], "none")  # the reserve alone, not the ensemble it stands by
    return dataclasses.replace(request, members=(member,), settings=quiet, prompts={member.name: tokens},
                               think=ThinkPlan(0), start=StartingWeights(np.ones(1)), reserve=None,
                               messages=tuple(messages), calibrator=own, prediction=final.text)  # fmt: skip


def escalated(final: FinalEvent, answer: FinalEvent, reserve: str) -> FinalEvent:
    """The reserve's ``answer`` given instead of the unsure ``final`` (kept as ``ensemble_text``),
    with its own confidence (read by the reserve's calibrator, marked unsure below
    ``abstain_below`` as any answer); the weights stay the ensemble's, which is what it learned.
    A reserve's answer that was cancelled leaves ``final`` as it was."""
    if answer.finish_reason == "cancelled":
        return final
    seconds = final.seconds + answer.seconds
    return dataclasses.replace(answer, escalated=reserve, ensemble_text=final.text, seconds=seconds,
                               wins={**final.wins, **answer.wins}, weights=final.weights)  # fmt: skip
