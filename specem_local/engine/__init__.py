"""The engine: the ``Ensemble`` and one answer's round loop, with everything a round calls.

``ensemble`` owns the loaded members, one answer at a time, cancel and close; ``answer_stream``
is one answer as its caller iterates it (members lost earlier brought back first); ``loading``
turns a config into members; ``rounds`` runs one answer (draft, verify, vote, learn, broadcast)
as a stream of events, ``roster`` says who takes part in it (model exit, lost members);
``member`` is one model's part in it; ``drafting``, ``contrastive``, ``vote``,
``feedback``, ``sampling``, ``segments`` and ``prompting`` are its pure steps; ``learned`` and
``choices`` carry weights across answers (calibration, your picks).

May import: ``backend``, ``models``, ``storage``, ``events``, ``settings``, ``errors``, ``dirs``.
Knows nothing of the front ends.
"""

from specem_local.engine import feedback, learned, sampling
from specem_local.engine.answer_stream import AnswerStream
from specem_local.engine.ask import Ask, FormatAsk, ask_from
from specem_local.engine.choices import best_rewards, choice_change
from specem_local.engine.ensemble import Ensemble
from specem_local.engine.format_compiler import allowed_tokens
from specem_local.engine.formats import FormatMatcher, member_matcher, output_format_from
from specem_local.engine.learned import built_in_calibrations, calibrate, names_in
from specem_local.engine.loading import prompt_format_for
from specem_local.engine.member import Member
from specem_local.engine.prompting import Message
from specem_local.engine.runner import AnswerRunner, threads_each
from specem_local.engine.sampling import make_sampler

__all__ = [
    "AnswerRunner",
    "AnswerStream",
    "Ask",
    "Ensemble",
    "FormatAsk",
    "FormatMatcher",
    "Member",
    "Message",
    "allowed_tokens",
    "ask_from",
    "best_rewards",
    "built_in_calibrations",
    "calibrate",
    "choice_change",
    "feedback",
    "learned",
    "make_sampler",
    "member_matcher",
    "names_in",
    "output_format_from",
    "prompt_format_for",
    "sampling",
    "threads_each",
]
