"""``specem serve``: the ensemble as a local endpoint that speaks OpenAI's API (``/v1``) and
Ollama's (``/api``), for Open WebUI, editor plugins, scripts and desktop apps.

``app.py`` has the routes, ``answers.py`` the line of answers on the shared models,
``gate.py`` what every request passes first (Host, Origin, CORS, Content-Type, the fault
barrier), ``running.py`` its life until a signal stops it, and ``openai_format.py`` /
``ollama_format.py`` the two APIs' shapes, as plain functions (``anthropic_format.py`` and
``anthropic_output.py``: Anthropic's Messages API, ``/v1/messages``, for the ``anthropic`` SDK
and Claude Code; ``mcp_rounds.py``: the agent loop a Responses request runs with the tools of
``--mcp``'s servers).
"""

from __future__ import annotations

from specem_local.errors import SpecemError
from specem_local.server.app import EnsembleServer, ServerOptions
from specem_local.server.gate import GateRules, is_loopback
from specem_local.server.running import run_until_stopped

__all__ = ["EnsembleServer", "GateRules", "ServerOptions", "check_binding", "run_until_stopped"]


def check_binding(host: str, api_key: str | None) -> None:
    """Refuse to put the models on the network without a key."""
    if not is_loopback(host) and not api_key:
        raise SpecemError(
            f"--host {host} would let other machines use these models with no key; give --api-key "
            "(or set SPECEM_API_KEY), or keep the default --host 127.0.0.1"
        )
