"""specem-local: several local LLMs answer together (SpecEM) on llama.cpp.

The scripting API::

    from specem_local import Ensemble, RoundEvent

    with Ensemble() as ensemble:
        for event in ensemble.stream("Why is the sky blue?"):
            if isinstance(event, RoundEvent):
                print(event.author, event.text)
"""

# llama.cpp before numpy, on every path (the API, the CLI, the chat app): the backend's face
# loads it first (see backend/__init__.py).
from specem_local import backend as _backend  # noqa: F401, I001

from specem_local.models.config import Config, ModelSpec, load_config
from specem_local.errors import SettingError, SpecemError
from specem_local.events import Candidate, FinalEvent, RoundEvent, StartEvent
from specem_local.settings import EnsembleSettings, LoadSettings

__all__ = [
    "AnswerStream",
    "Candidate",
    "Config",
    "Ensemble",
    "EnsembleSettings",
    "FinalEvent",
    "LoadSettings",
    "Message",
    "ModelSpec",
    "RoundEvent",
    "SettingError",
    "SpecemError",
    "StartEvent",
    "load_config",
]


def __getattr__(name: str):
    # Imported lazily so that `specem models list` and config errors never load the engine.
    if name in ("Ensemble", "AnswerStream", "Message"):
        from specem_local import engine

        return getattr(engine, name)
    raise AttributeError(name)
