"""The engine: the ``Ensemble`` and one answer's round loop, with everything a round calls.

``ensemble`` owns the loaded members, one answer at a time, cancel and close; ``loading`` turns
a config into members; ``rounds`` runs one answer (draft, verify, vote, learn, broadcast) as a
stream of events; ``member`` is one model's part in it; ``drafting``, ``contrastive``, ``vote``,
``feedback``, ``sampling``, ``segments`` and ``prompting`` are its pure steps; ``learned`` and
``choices`` carry weights across answers (calibration, your picks).

May import: ``backend``, ``models``, ``storage``, ``events``, ``settings``, ``errors``, ``dirs``.
Knows nothing of the front ends.
"""

from specem_local.engine import feedback, learned, sampling
from specem_local.engine.ensemble import AnswerStream, Ensemble, threads_each
from specem_local.engine.member import Member
from specem_local.engine.prompting import Message

__all__ = ["AnswerStream", "Ensemble", "Member", "Message", "feedback", "learned", "sampling", "threads_each"]
