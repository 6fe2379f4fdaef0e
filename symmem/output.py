"""Writing generated files: everything rendered in memory first, then placed; all or nothing on disk.

`write_tree` builds the whole output folder in a staging folder beside the target, then swaps it in with
renames (the old folder is renamed aside, the new one renamed into place, the old one deleted). On any failure
the target is left exactly as it was and nothing is left behind: no staging folder, no empty folder.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import struct
import sys
import tempfile
from pathlib import Path

from symmem.errors import SymmemError


def umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fail(field: str, out: str, why: str) -> SymmemError:
    return SymmemError(f"{field} = {out!r}: {why}")


def _os_why(e: OSError) -> str:
    return f"cannot write there ({e.strerror or e.__class__.__name__})"


def check_target(out: str | Path, field: str = "--out") -> Path:
    """The resolved output folder `out`, or the error `write_tree` would give for it, found before anything is
    generated: an empty name, a file, the current folder or a folder holding it, a root, an existing folder that
    could not be replaced."""
    name = str(out)
    if not name.strip():
        raise _fail(field, name, "empty; give a folder path")
    if "\0" in name:
        raise _fail(field, name, "not a usable folder name")
    target = Path(name)
    try:  # (a symbolic-link loop is a RuntimeError on Python 3.11, a name too long an OSError)
        if target.is_symlink():
            target = target.resolve()
        if target.exists() and not target.is_dir():
            raise _fail(field, name, "exists and is not a folder")
        here = Path.cwd().resolve()
        resolved = target.resolve()
    except (OSError, RuntimeError) as e:
        raise _fail(field, name, _os_why(e) if isinstance(e, OSError) else "cannot write there (a symbolic-link "
                                                                            "loop)") from None
    if resolved == here or resolved in here.parents:
        raise _fail(field, name, "is the current folder or holds it; name a folder of its own for the output")
    if resolved.parent == resolved:
        raise _fail(field, name, "is a filesystem root; name a folder of its own for the output")
    if resolved.exists():
        _check_removable(resolved, field, name)
    return resolved


def _write_through(path: Path, data: bytes, field: str, name: str, fifo: bool) -> None:
    """Write `data` into an existing character device or FIFO in place (never replacing it), in bounded time."""
    import select

    try:
        # non-blocking open: a FIFO nobody reads fails at once (ENXIO) instead of waiting for a reader
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        if fifo and e.errno == errno.ENXIO:
            raise _fail(field, name, "is a FIFO that nobody is reading; start its reader first") from None
        raise _fail(field, name, _os_why(e)) from None
    try:
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view[:1 << 16])
            except BlockingIOError:
                if not select.select([], [fd], [], WRITE_THROUGH_SECONDS)[1]:
                    raise _fail(field, name, f"its reader stopped reading for {WRITE_THROUGH_SECONDS:.0f} s; "
                                             "nothing more was written") from None
                continue
            except OSError as e:
                raise _fail(field, name, _os_why(e)) from None
            view = view[n:]
    finally:
        os.close(fd)


def write_tree(out: str | Path, files: dict[str, bytes | str], field: str = "--out") -> list[Path]:
    """Write `files` (relative path -> content) as the folder `out`, all or nothing.

    Files already in `out` that `files` does not name are kept (hard-linked, or copied, into the new folder);
    a folder where a file is to be written (or a file where a folder is needed) is an error, not a deletion.
    """
    name = str(out)
    resolved = check_target(out, field)
    for rel in files:
        p = Path(rel)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            raise ValueError(f"write_tree: {rel!r} is not a relative path inside the folder")

    parent = resolved.parent
    created: list[Path] = []  # parent folders made here, removed again on failure
    staging: Path | None = None
    aside: Path | None = None
    try:
        missing = [d for d in (parent, *parent.parents) if not d.exists()]
        for d in reversed(missing):
            d.mkdir()
            created.append(d)
        staging = Path(tempfile.mkdtemp(prefix=f".{resolved.name}.symmem-new-", dir=parent))
        for rel, content in sorted(files.items()):
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
        if resolved.exists():
            _carry_over(resolved, staging, files, field, name)
            os.chmod(staging, stat.S_IMODE(resolved.stat().st_mode))
            aside = Path(tempfile.mkdtemp(prefix=f".{resolved.name}.symmem-old-", dir=parent))
            os.rmdir(aside)  # a free name beside the target, for the old folder
            os.rename(resolved, aside)
            try:
                os.rename(staging, resolved)
            except OSError:
                os.rename(aside, resolved)  # put the old folder back
                aside = None
                raise
            staging = None
            shutil.rmtree(aside, ignore_errors=True)
            aside = None
        else:
            os.chmod(staging, 0o777 & ~umask())  # mkdtemp makes it 0700
            os.rename(staging, resolved)
            staging = None
    except OSError as e:
        raise _fail(field, name, _os_why(e)) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if staging is not None or (not resolved.exists()):
            for d in reversed(created):
                try:
                    d.rmdir()
                except OSError:
                    pass
    return [resolved / rel for rel in sorted(files)]


def _carry_over(old: Path, new: Path, files: dict, field: str, name: str) -> None:
    """Put into `new` what `old` holds and `files` does not name, by hard link (else copy); conflicts refused."""
    wanted = {Path(rel) for rel in files}
    folders = {p for rel in wanted for p in rel.parents if p != Path(".")}
    for root, dirs, names in os.walk(old):
        r = Path(root).relative_to(old)
        for d in list(dirs):
            rel = r / d
            if rel in wanted:
                raise _fail(field, name, f"{rel} is a folder where symmem writes a file; move it away first")
            if os.path.islink(old / rel) or rel not in folders:
                dirs.remove(d)  # a folder symmem does not write into: carried over whole
                _place(old / rel, new / rel)
        for f in names:
            rel = r / f
            if rel in folders:
                raise _fail(field, name, f"{rel} is a file where symmem needs a folder; move it away first")
            if rel not in wanted:
                _place(old / rel, new / rel)


# Linux inode flags (chattr +i, +a): a file or folder carrying one cannot be removed or renamed, even by root.
# FS_IOC_GETFLAGS is _IOR('f', 1, long): its code holds the size of a C long.
_FS_IOC_GETFLAGS = 0x80006601 | struct.calcsize("l") << 16
_FS_IMMUTABLE_FL, _FS_APPEND_FL = 0x10, 0x20


def _locked(path: Path) -> bool:
    """Whether `path` (a regular file or a folder) is immutable or append-only (chattr +i / +a)."""
    st = path.lstat()
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return False
    flags = getattr(st, "st_flags", 0)  # the BSDs and macOS: chflags
    if flags:
        return bool(flags & (getattr(stat, "UF_IMMUTABLE", 0) | getattr(stat, "UF_APPEND", 0)
                             | getattr(stat, "SF_IMMUTABLE", 0) | getattr(stat, "SF_APPEND", 0)))
    if not sys.platform.startswith("linux"):
        return False
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return False
    try:
        (value,) = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))[:4])
    except OSError:  # a filesystem without inode flags
        return False
    finally:
        os.close(fd)
    return bool(value & (_FS_IMMUTABLE_FL | _FS_APPEND_FL))


def _check_removable(old: Path, field: str, name: str) -> None:
    """The old folder is deleted once the new one is in place: refuse now (nothing written yet) what could not
    be deleted then, which would leave the old folder behind beside the new one."""
    if _locked(old):
        raise _fail(field, name, "is immutable or append-only (chattr +i/+a); symmem cannot replace it")
    for root, dirs, names in os.walk(old):
        r = Path(root)
        if (dirs or names) and not os.access(r, os.W_OK | os.X_OK):
            raise _fail(field, name, f"{r.relative_to(old) if r != old else 'the folder'} is read-only; symmem "
                                     "replaces the whole folder and could not delete the old one")
        for entry in (*dirs, *names):
            if _locked(r / entry):
                raise _fail(field, name, f"{(r / entry).relative_to(old)} is immutable or append-only (chattr "
                                         "+i/+a); symmem replaces the whole folder and could not delete the old one")


def _place(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(src, dst)


def _link_or_copy(src, dst) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


STDOUT = "-"  # an output file named "-" is standard output
WRITE_THROUGH_SECONDS = 30.0  # how long a FIFO's reader may stop reading before the write gives up


def _stat(path: Path, field: str, name: str) -> os.stat_result | None:
    """What `path` is (following a link), or None when nothing is there; one line for any other failure."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _fail(field, name, _os_why(e)) from None


def _not_regular(st: os.stat_result, field: str, name: str) -> SymmemError:
    kind = "block device" if stat.S_ISBLK(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else \
        "special file"
    return _fail(field, name, f"is a {kind}, not a regular file: symmem replaces regular files only, writes "
                              "through a character device or a FIFO, and writes - to standard output")


def check_file_target(out: str | Path, field: str = "--out", inputs: tuple = ()) -> None:
    """The error `write_file` would give for `out`, found before anything is measured or generated (a folder, a
    block device or socket, a folder that does not exist or cannot be written), and `out` naming one of the
    command's own `inputs` (files it reads: replacing one would lose it)."""
    name = str(out)
    if name == STDOUT:
        return
    if not name or "\0" in name:
        raise _fail(field, name, "must name a file")
    path = Path(name)
    st = _stat(path, field, name)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise _fail(field, name, "must name a file (it is a folder)")
    if st is not None and not stat.S_ISREG(st.st_mode) and not (stat.S_ISCHR(st.st_mode)
                                                                or stat.S_ISFIFO(st.st_mode)):
        raise _not_regular(st, field, name)
    if st is None or stat.S_ISREG(st.st_mode):  # replaced by a file written beside it: its folder must take one
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise _fail(field, name, "cannot write: no such folder")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise _fail(field, name, "cannot write: permission denied in its folder")
    for given in inputs:
        if st is not None and given is not None and Path(str(given)).is_file():
            try:
                same = os.path.samefile(path, str(given))
            except OSError:
                same = False
            if same:
                raise _fail(field, name, f"is the input {str(given)[:60]!r}: writing it would replace it; name "
                                         "another file")


def write_file(out: str | Path, data: bytes, field: str = "--out") -> Path | None:
    """One file, all or nothing: written beside the target, then renamed over it (permissions by the umask).

    `-` is standard output (None is returned). A target that exists and is not a regular file is never replaced:
    a character device (/dev/null) or a FIFO is written through (a FIFO only while a reader has it open, and
    within WRITE_THROUGH_SECONDS of its last read); a block device, a socket or a folder is refused. A symbolic
    link is followed to what it names."""
    name = str(out)
    if name == STDOUT:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return None
    path = Path(out)
    if not name:
        raise _fail(field, name, "must name a file")
    st = _stat(path, field, name)
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise _fail(field, name, "must name a file (it is a folder)")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            _write_through(path, data, field, name, fifo=stat.S_ISFIFO(st.st_mode))
            return path
        raise _not_regular(st, field, name)
    if st is not None and os.path.islink(path):  # written to what the link names; the link stays
        path = Path(os.path.realpath(path))
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _fail(field, str(out), f"cannot write: {_os_why(e)}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise _fail(field, str(out), f"cannot write: {_os_why(e)}") from None
    return path
