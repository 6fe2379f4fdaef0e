"""Reading a named built-in resource or a user's file, with the same one-line errors everywhere.

Every file symmem reads on a user's behalf (a config.json, a scenario TOML, a histogram, a TOML's `model =`)
goes through `read_text_file`: a regular file only (a directory, FIFO, device such as /dev/zero or socket is
refused before anything is read), at most `MAX_FILE_BYTES`, UTF-8.
"""

from __future__ import annotations

import os
import stat
from importlib import resources
from pathlib import Path

from symmem.errors import SymmemError

MAX_FILE_BYTES = 4 << 20  # 4 MiB: DeepSeek-V3's config.json is 1.7 kB, a 256-expert histogram a few kB


def read_text_file(path: str | os.PathLike, field: str) -> str:
    """The UTF-8 text of a regular file of at most 4 MiB; anything else is a one-line `SymmemError`."""
    name = str(path)
    if not name:
        raise SymmemError(f"{field} = '': empty; give a file path")
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not wait; the file is checked as opened (no race).
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise SymmemError(f"{field} = {name!r}: cannot read: {e.strerror or e.__class__.__name__}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise SymmemError(f"{field} = {name!r}: cannot read: is {kind}; give a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise SymmemError(f"{field} = {name!r}: {st.st_size:,} bytes, larger than the limit of "
                              f"{MAX_FILE_BYTES:,} bytes (4 MiB)")
        chunks, total = [], 0
        while True:  # a file that grows while read is still capped
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_FILE_BYTES:
                raise SymmemError(f"{field} = {name!r}: larger than the limit of {MAX_FILE_BYTES:,} bytes (4 MiB)")
            chunks.append(chunk)
    except OSError as e:
        raise SymmemError(f"{field} = {name!r}: cannot read: {e.strerror or e.__class__.__name__}") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SymmemError(f"{field} = {name!r}: not UTF-8 text (byte {e.start})") from None


def read_named_or_path(field: str, name: str, package: str, suffix: str, builtin: tuple[str, ...],
                       unknown: str) -> tuple[str, str]:
    """(text, source) of the built-in `name` in `package`, else of the file at path `name`.

    `unknown` is the rule said of a name that is neither, followed by the built-in names."""
    if name in builtin:
        return resources.files(package).joinpath(f"{name}{suffix}").read_text(), name
    if not name:
        raise SymmemError(f"{field} = '': empty; give a built-in name ({', '.join(builtin)}) or a file path")
    path = Path(name)
    try:
        exists = os.path.lexists(path)
    except (OSError, ValueError):  # an embedded NUL byte, a name too long
        raise SymmemError(f"{field} = {name!r}: not a usable file name") from None
    if not exists:
        if path.suffix or "/" in name:
            raise SymmemError(f"{field} = {name!r}: no such file")
        raise SymmemError(f"{field} = {name!r}: {unknown}: {', '.join(builtin)}")
    return read_text_file(path, field), str(path)


def read_json_object(path: str, field: str) -> dict:
    """A JSON file that must hold an object (an HF config.json), read by `read_text_file` and parsed strictly."""
    from symmem import _json

    raw = _json.loads(read_text_file(path, field), f"{field} = {path!r}")
    if not isinstance(raw, dict):
        raise SymmemError(f"{field} = {path!r}: must hold a JSON object")
    return raw
