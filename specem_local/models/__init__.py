"""Where models come from: ``models.toml`` and the built-in ensembles (``config``), each kind of
source (``sources``: a path, Hugging Face, the demo packages, Ollama, LM Studio), other tools'
stores on disk (``local_stores``, ``scan``), GGUF headers read without loading weights
(``gguf``), the demo models (``demo_models``), edits to models.toml (``models_file``) and
members on other machines (``rpc``: endpoints and the HELLO probe).

May import: ``settings``, ``errors``, ``dirs``. Nothing here loads llama.cpp.
"""

from specem_local.models.config import Config, ModelSpec, builtin_ensembles, load_config, model_colours, tomllib
from specem_local.models.demo_models import DEMO_MODELS, assemble_demo, demo_path
from specem_local.models.gguf import read_model_header
from specem_local.models.rpc import CONNECTION_CAPS, PROTOCOL, Endpoint, RpcUnavailable, probe
from specem_local.models.scan import FoundModel, scan

__all__ = [
    "CONNECTION_CAPS",
    "DEMO_MODELS",
    "PROTOCOL",
    "Config",
    "Endpoint",
    "FoundModel",
    "ModelSpec",
    "RpcUnavailable",
    "assemble_demo",
    "builtin_ensembles",
    "demo_path",
    "load_config",
    "model_colours",
    "probe",
    "read_model_header",
    "scan",
    "tomllib",
]
