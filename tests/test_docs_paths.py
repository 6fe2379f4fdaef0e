"""The docs point where things are: every repository path named in docs/*.md and README.md exists, and the
command blocks marked runnable run.

A path is named in backticks (`symmem/steptime/`) or as a link target ([text](../symmem/comm.py), relative to the
file that links it); it counts when it starts with one of ROOTS. A block marked runnable is a fenced block whose
info string is `bash runnable`; each of its lines that starts with `symmem ` runs in-process through
`symmem.cli.main.main` and must exit 0.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
ROOTS = ("symmem/", "derivations/", "tests/", "docs/", "paper_tables/", "benchmarks/", ".ci/")
# paths of other repositories, named beside their repository (not ours)
EXTERNAL = {"docs/b200/b200_release_v1.2_summary.md",  # MooreThreads/SimuMax
            "benchmarks/llama3_h100_202412_torchtitan.md",  # pytorch/torchtitan
            "benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md"}  # pytorch/torchtitan

_BACKTICK = re.compile(r"`([^`\s]+)`")
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)


def _clean(path: str) -> str:
    path = re.sub(r"[:#].*$", "", path)  # symmem/comm.py:120, file.md#section
    return path.rstrip(".,;)")


def named_paths(md: Path) -> list[tuple[str, Path]]:
    """(as written, where it points) for every repository path the file names."""
    text = md.read_text(encoding="utf-8")
    # fenced code blocks are examples (commands, output), not references: only their prose neighbours count
    prose = _FENCE.sub("", text)
    out = []
    for m in _BACKTICK.finditer(prose):
        p = _clean(m.group(1))
        if p.startswith(ROOTS) and not any(ch in p for ch in "*{}<>$"):  # no globs, templates or placeholders
            out.append((p, REPO / p))
    for m in _LINK.finditer(prose):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        resolved = (md.parent / _clean(target)).resolve()
        try:
            rel = resolved.relative_to(REPO).as_posix()
        except ValueError:
            continue
        if (rel + ("/" if resolved.is_dir() else "")).startswith(ROOTS) or rel.startswith(ROOTS):
            out.append((target, resolved))
    return out


def _exists(path: Path) -> bool:
    # a generated table named by its stem (`paper_tables/precision_gpu_static`: its .md, .csv and .tex) counts
    return path.exists() or (path.parent.is_dir() and any(path.parent.glob(path.name + ".*")))


@pytest.mark.parametrize("md", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_named_paths_exist(md):
    missing = sorted({written for written, path in named_paths(md) if written not in EXTERNAL and not _exists(path)})
    assert missing == [], f"{md.relative_to(REPO)} names paths that do not exist: {missing}"


def test_the_docs_name_paths():
    assert sum(len(named_paths(md)) for md in DOCS) > 50


def runnable_commands() -> list[tuple[str, str]]:
    out = []
    for md in DOCS:
        for info, body in _FENCE.findall(md.read_text(encoding="utf-8")):
            if info.split() == ["bash", "runnable"]:
                for line in body.splitlines():
                    if line.strip().startswith("symmem "):
                        out.append((md.relative_to(REPO).as_posix(), line.strip()))
    return out


def test_some_commands_are_marked_runnable():
    assert len(runnable_commands()) >= 2


@pytest.mark.parametrize("where, command", runnable_commands(), ids=lambda v: v if " " not in v else v[:60])
def test_runnable_command_exits_zero(where, command, capsys, tmp_path, monkeypatch):
    from symmem.cli.main import main

    monkeypatch.chdir(tmp_path)  # a command that writes files writes them here
    argv = shlex.split(command)[1:]
    assert main(argv) == 0, f"{where}: {command}"
    capsys.readouterr()
