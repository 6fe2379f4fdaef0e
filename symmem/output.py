"""Writing generated files: everything rendered in memory first, then placed; nothing half-written on failure."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from symmem.errors import SymmemError


def write_tree(out: str | Path, files: dict[str, bytes | str]) -> list[Path]:
    """Write `files` (relative path -> content) under `out`, atomically per file, all or nothing.

    The files are first written to a staging folder beside `out`; only when all are written are they moved
    into place. An unwritable `out` is a `SymmemError` and leaves nothing behind.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SymmemError(f"--out = {str(out)!r}: exists and is not a folder")
    parent = out.parent if str(out.parent) else Path(".")
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".symmem-staging-", dir=out))
    except OSError as e:
        raise SymmemError(f"--out = {str(out)!r}: cannot write there ({e.strerror or e.__class__.__name__})") from None
    del parent
    written: list[Path] = []
    try:
        for rel, content in sorted(files.items()):
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            data = content.encode() if isinstance(content, str) else content
            target.write_bytes(data)
        for rel in sorted(files):
            final = out / rel
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, final)
            written.append(final)
    except OSError as e:
        raise SymmemError(f"--out = {str(out)!r}: cannot write there ({e.strerror or e.__class__.__name__})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written
