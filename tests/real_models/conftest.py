import pytest

from specem_local.engine import Ensemble
from tests.conftest import demo_config


@pytest.fixture(scope="session")
def trio():
    """The demo ensemble, loaded once for the session (about 2 s)."""
    with Ensemble.from_config(demo_config(max_tokens=40)) as ensemble:
        yield ensemble
