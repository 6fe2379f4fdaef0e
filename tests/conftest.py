import pytest

from symmem.scenario import load_scenario


@pytest.fixture(scope="session")
def paper():
    return load_scenario("paper")
