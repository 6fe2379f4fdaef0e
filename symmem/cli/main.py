"""The `symmem` command line. Bad input: one line on stderr, exit code 2, nothing half-written."""

from __future__ import annotations

import argparse
import errno
import functools
import os
import re
import sys
from collections.abc import Callable

from symmem import _gc
from symmem.errors import SymmemError

_NEGATIVE_VALUE = re.compile(r"^-[0-9.]", re.ASCII)  # `-80GB`, `-2`, `-.5`: a value, never a flag


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        # no abbreviations: `--gpu` must never silently mean `--gpu-memory` (nor be ambiguous with `--gpus`)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _parse_optional(self, arg_string):
        # argparse takes `-80GB` for an unknown flag ("expected one argument"); a token that is a minus sign before
        # a digit is a value, so that `--gpu-memory -80GB` gets the flag's own one-line error as any bad value does
        if _NEGATIVE_VALUE.match(arg_string or "") and arg_string not in self._option_string_actions:
            return None
        return super()._parse_optional(arg_string)

    def error(self, message: str):  # one line, exit 2, as every other bad input; "symmem:" is printed once
        command = self.prog.removeprefix("symmem").strip()
        raise SymmemError(f"{command}: {message}" if command else message)

    def _get_value(self, action, arg_string):
        # No flag takes an empty value: `--model ''` or `--recompute ''` would otherwise mean the default, silently
        if action.option_strings and isinstance(arg_string, str) and not arg_string.strip():
            raise argparse.ArgumentError(action, f"{arg_string!r}: empty; give a value, or leave the flag out")
        return super()._get_value(action, arg_string)


def _commands() -> dict[str, tuple[str, Callable, Callable]]:
    from symmem.cli import commands

    return commands.COMMANDS


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("symmem")
    except metadata.PackageNotFoundError:
        return "0.1.0 (not installed)"


class _Version(argparse.Action):
    # argparse's "version" action wants the text when the parser is built; reading the installed metadata costs
    # more than building the whole parser, so it is read only when asked for
    def __call__(self, parser, namespace, values, option_string=None):
        print(f"symmem {_version()}")
        parser.exit()


@functools.cache  # built once per process (20 ms): parsing leaves it unchanged, and derivations parse flags too
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="symmem", description="Closed-form GPU memory of DeepSeek MoE training, derived from "
                                                "layer dataflows.")
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (help_text, add_args, _run) in _commands().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 done (or EQUAL), 1 DIFFERENT (`check`, `measure`), 2 bad input or output that cannot be
    written (one line on stderr),
    3 an internal error (a bug of symmem: one line on stderr naming the exception), 130 interrupted."""
    args = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not args.command:
            raise SymmemError(f"missing command; choose one of {', '.join(_commands())} (symmem --help says more)")
        _gc.settle(load=("sympy",))  # every command runs the engine, on sympy
        return _commands()[args.command][2](args) or 0
    except SymmemError as e:
        from symmem.cli._flag_names import in_flags

        print(f"symmem: error: {in_flags(str(e), args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("symmem: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        if e.errno not in _WRITE_ERRORS:
            return _internal(e)
        return _output_failed(e)
    except Exception as e:  # noqa: BLE001 - the last line of defence: one line, exit 3, never a traceback
        return _internal(e)


def _internal(e: Exception) -> int:
    msg = " ".join(str(e).split())
    print(f"symmem: internal error: {e.__class__.__name__}: {msg[:300]}", file=sys.stderr)
    return 3


# a write that cannot succeed: a full disk (`> /dev/full`), a closed or read-only standard output
_WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EBADF, errno.EIO, errno.EROFS}


def _output_failed(e: OSError) -> int:
    """A failed write is an error, never exit 0 with nothing written: one line on stderr, exit 2. What is still
    buffered for stdout is dropped (fd 1 pointed at /dev/null), so that Python's own flush at exit does not fail
    again with a traceback-like "Exception ignored" message."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass
    print(f"symmem: error: could not write the output (standard output): {e.strerror or e}", file=sys.stderr)
    return 2


def cli() -> int:
    """The program: `symmem ...` and `python -m symmem ...` (a one-shot process: see `symmem._gc`)."""
    _gc.enable()
    if sys.stdout is None:  # started with stdout closed (`symmem ... >&-`): every print would vanish silently
        print("symmem: error: standard output is closed; nothing could be written (redirect it to a file, or to "
              "/dev/null to discard it)", file=sys.stderr)
        return 2
    code = main()
    try:
        sys.stdout.flush()  # the last of the output: a write that fails here fails the command
    except BrokenPipeError:
        pass  # a reader that stopped early (`symmem ... | head`): as main() treats it
    except OSError as e:
        return _output_failed(e)
    return code


def program() -> None:
    """The program's entry point (`symmem`, `python -m symmem`): `cli()`, then the process ends at once. Python's
    own exit would tear down every module and object sympy and matplotlib left behind, which does nothing for a
    one-shot process and took 0.2 s (measured: `python -c "import sympy, jinja2, matplotlib.pyplot"` ends in 0.95 s,
    0.74 s with the same `os._exit`). What the program wrote is flushed first; every file it writes is closed
    where it is written, and no child process outlives the command."""
    code = cli()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: cli() already answered for stdout
            pass
    os._exit(code)
