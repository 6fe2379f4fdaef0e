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


@pytest.fixture
def registry_restored(monkeypatch):
    """A profile registered by `--gpu FILE` lives for the process, as a command's does; the tests share one process,
    so each test's registrations are undone after it (they were seen by the page tests that ran later)."""
    from symmem import hardware, units
    from symmem.steptime import kernels, measured, model

    monkeypatch.setattr(hardware, "GPUS", dict(hardware.GPUS))
    monkeypatch.setattr(units, "GPUS", dict(units.GPUS))
    monkeypatch.setattr(model, "DEVICE_CONSTANTS", dict(model.DEVICE_CONSTANTS))
    monkeypatch.setattr(kernels, "REGISTERED", dict(kernels.REGISTERED))
    monkeypatch.setattr(measured, "KERNEL_CONSTANTS", dict(measured.KERNEL_CONSTANTS))
