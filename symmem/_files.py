"""Reading a named built-in resource or a user's file, with the same one-line errors everywhere."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from symmem.errors import SymmemError


def read_named_or_path(field: str, name: str, package: str, suffix: str, builtin: tuple[str, ...],
                       unknown: str) -> tuple[str, str]:
    """(text, source) of the built-in `name` in `package`, else of the file at path `name`.

    `unknown` is the rule said of a name that is neither, followed by the built-in names."""
    if name in builtin:
        return resources.files(package).joinpath(f"{name}{suffix}").read_text(), name
    path = Path(name)
    if not path.exists():
        if path.suffix or "/" in name:
            raise SymmemError(f"{field} = {name!r}: no such file")
        raise SymmemError(f"{field} = {name!r}: {unknown}: {', '.join(builtin)}")
    try:
        return path.read_text(), str(path)
    except (OSError, UnicodeDecodeError) as e:
        raise SymmemError(f"{field} = {name!r}: cannot read: {e.__class__.__name__}") from None
