"""The one error type of symmem.

Every message names the field, the value and the rule, so that the CLI can print it on one line and exit 2.
"""

from __future__ import annotations


class SymmemError(ValueError):
    """Bad input or an impossible request, with a one-line explanation."""

    def __init__(self, message: str) -> None:
        # One line, always: the CLI prints str(error) as it is.
        super().__init__(" ".join(str(message).split()))
