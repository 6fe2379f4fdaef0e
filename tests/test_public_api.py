import doctest
import importlib
import pkgutil

import symmem


def test_every_public_name_imports():
    for name in symmem.__all__:
        assert getattr(symmem, name) is not None, name


def test_every_module_imports():
    for info in pkgutil.walk_packages(symmem.__path__, "symmem."):
        if info.name.startswith("symmem.validate") or info.name == "symmem.__main__":
            continue  # needs the optional torch extra; tested in tests/validate
        importlib.import_module(info.name)


def test_docstring_examples_run():
    result = doctest.testmod(symmem, verbose=False)
    assert result.attempted >= 1 and result.failed == 0
