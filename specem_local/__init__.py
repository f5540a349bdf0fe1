"""specem-local: several local LLMs answer together (SpecEM) on llama.cpp.

The scripting API::

    from specem_local import Ensemble

    with Ensemble() as ensemble:
        for event in ensemble.stream("Why is the sky blue?"):
            ...
"""

from specem_local.config import Config, EnsembleSettings, ModelSpec, load_config
from specem_local.errors import SpecemError
from specem_local.events import Candidate, FinalEvent, RoundEvent

__all__ = [
    "Candidate",
    "Config",
    "Ensemble",
    "EnsembleSettings",
    "FinalEvent",
    "Message",
    "ModelSpec",
    "RoundEvent",
    "SpecemError",
    "load_config",
]


def __getattr__(name: str):
    # Imported lazily so that `specem models list` and config errors never load llama.cpp.
    if name == "Ensemble":
        from specem_local.engine import Ensemble

        return Ensemble
    if name == "Message":
        from specem_local.prompting import Message

        return Message
    raise AttributeError(name)
