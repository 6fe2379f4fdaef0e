import importlib.util
import os

import pytest

from symmem.scenario import load_scenario


def pytest_configure(config):
    # On CI every test must run: a missing validate extra is a broken install, not a reason to skip the byte-exact
    # PyTorch comparisons (pdflatex is checked the same way in tests/test_render.py).
    if os.environ.get("CI") == "true":
        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            raise pytest.UsageError(f"CI=true: {', '.join(missing)} missing: install the validate extra "
                                    "(pip install -e '.[test,validate]')")


@pytest.fixture(scope="session")
def paper():
    return load_scenario("paper")
