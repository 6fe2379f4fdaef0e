"""The `symmem` command line. Bad input: one line on stderr, exit code 2, nothing half-written."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from symmem.errors import SymmemError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, as every other bad input
        raise SymmemError(f"{self.prog}: {message}")


def _commands() -> dict[str, tuple[str, Callable, Callable]]:
    from symmem.cli import commands

    return commands.COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="symmem", description="Closed-form GPU memory of DeepSeek MoE training, derived from "
                                                "layer dataflows.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (help_text, add_args, _run) in _commands().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return 2
        return _commands()[args.command][2](args) or 0
    except SymmemError as e:
        print(f"symmem: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("symmem: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
