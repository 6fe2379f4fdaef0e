"""The `symmem` command line (`symmem.cli.main`): one module per command, one flag-to-Scenario mapping
(`symmem.cli.args`). Importing it imports no sympy: commands import what they need when they run."""
