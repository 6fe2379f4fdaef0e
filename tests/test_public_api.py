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


def test_help_imports_no_sympy():
    """`symmem --help` builds every command's parser without importing sympy or numpy (they take most of the time
    of a cold start; the benchmark compares the two side by side)."""
    import subprocess
    import sys

    code = ("import sys\nfrom symmem.cli.main import build_parser\nbuild_parser().format_help()\n"
            "import symmem\nassert 'sympy' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
