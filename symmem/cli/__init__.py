"""The `symmem` command line (`symmem.cli.main`): one module per command, one flag-to-Scenario mapping
(`symmem.cli.args`). Importing it imports no sympy: commands import what they need when they run."""


def main(argv: list[str] | None = None) -> int:
    from symmem.cli.main import main as _main

    return _main(argv)
