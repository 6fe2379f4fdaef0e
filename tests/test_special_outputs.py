"""Issue 45, defect 1: an output path that names a device or a FIFO is written through, never replaced by a regular
file (symmem runs as root in CI: it could replace /dev/null); `-` is standard output. The devices and FIFOs are made
here, in a temporary folder (mknod, mkfifo); nothing under /dev is touched."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from symmem.cli.main import main
from symmem.output import write_file

HTML = ["html", "--model", "llama-3-8b"]


def _null_device(tmp_path):
    """A character device like /dev/null (1, 3), in the temporary folder (root only)."""
    path = tmp_path / "null"
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    return path


def _reader(path, box, opened):
    """Open the FIFO for reading without waiting for a writer (so the writer finds a reader), then read until the
    writer, once there, closes it (60 s at most)."""
    import time

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    opened.set()
    chunks, deadline = [], time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:  # a writer is there, nothing to read yet
                time.sleep(0.005)
                continue
            if chunk:
                chunks.append(chunk)
            elif chunks:  # EOF after data: the writer closed
                break
            else:  # no writer yet
                time.sleep(0.005)
    finally:
        os.close(fd)
    box["data"] = b"".join(chunks)


def test_a_character_device_is_written_through_not_replaced(capsys, tmp_path):
    dev = _null_device(tmp_path)
    assert main([*HTML, "-o", str(dev)]) == 0
    assert stat.S_ISCHR(os.lstat(dev).st_mode)  # still the device, not a regular file
    assert sorted(os.listdir(tmp_path)) == ["null"]  # nothing left beside it


def test_a_full_device_fails_in_one_line(capsys, tmp_path):
    full = tmp_path / "full"
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # like /dev/full: every write fails with ENOSPC
    except PermissionError:
        pytest.skip("mknod needs root")
    assert main([*HTML, "-o", str(full)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left" in err and stat.S_ISCHR(os.lstat(full).st_mode)


def test_a_fifo_is_written_through_to_its_reader(capsys, tmp_path):
    fifo = tmp_path / "page"
    os.mkfifo(fifo)
    box: dict = {}
    opened = threading.Event()
    reader = threading.Thread(target=_reader, args=(fifo, box, opened))
    reader.start()
    try:
        assert opened.wait(60)
        code = main([*HTML, "-o", str(fifo)])
    finally:
        reader.join(timeout=60)
    assert code == 0 and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert box["data"].startswith(b"<!doctype html>") and box["data"].rstrip().endswith(b"</html>")


def test_a_fifo_nobody_reads_is_refused_at_once(capsys, tmp_path):
    fifo = tmp_path / "page"
    os.mkfifo(fifo)
    assert main([*HTML, "-o", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "FIFO that nobody is reading" in err and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dash_is_standard_output(capsysbinary, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*HTML, "-o", "-"]) == 0
    out, err = capsysbinary.readouterr()
    assert out.startswith(b"<!doctype html>") and b"wrote standard output" in err
    assert os.listdir(tmp_path) == []  # no file named '-'


def test_sweep_plot_onto_a_device(capsys, tmp_path):
    # --plot takes its format from the suffix: a device named like a figure
    _null_device(tmp_path).rename(tmp_path / "region.svg")
    svg = tmp_path / "region.svg"
    code = main(["sweep", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "H100", "-s", "4096", "--top", "1",
                 "--plot", str(svg)])
    assert code == 0, capsys.readouterr().err
    assert stat.S_ISCHR(os.lstat(svg).st_mode) and os.listdir(tmp_path) == ["region.svg"]


@pytest.mark.parametrize("kind", ["socket"])
def test_other_special_files_are_refused(tmp_path, kind):
    import socket

    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        from symmem.errors import SymmemError

        with pytest.raises(SymmemError, match="is a socket, not a regular file"):
            write_file(path, b"x", "--output")
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
