"""The `vramlens` command: parse, call the API, render. One module per command.

Library errors become one red line on stderr and exit code 2 (no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from typing import Any

from vramlens import __version__
from vramlens.errors import VramlensError

#: Command modules, in the order `vramlens --help` lists them. Each has
#: ``add_parser(subparsers) -> argparse.ArgumentParser`` and sets ``func`` on it.
COMMANDS = (
    "estimate",
    "models",
    "gpus",
    "trace_cmd",
    "fit",
    "place",
    "capacity",
    "snapshot",
    "validate",
    "serve",
    "runs",
    "run_cmd",
    "calibrate_cmd",
)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the usage block (30 lines for estimate) would bury the one line
    that says what is wrong; ``--help`` still prints it. Subcommands inherit the class.

    ``type=int`` and ``type=float`` read ASCII digits only (Python's int() takes '٤٠٩٦' as 4096): argparse
    looks a type up in the parser's registry first, so every flag of every subcommand gets the check."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from vramlens.cli.options import ascii_float, ascii_int

        self.register("type", int, ascii_int)
        self.register("type", float, ascii_float)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, _red(f"error: {_shorten_choice(message)} (see {self.prog} --help)") + "\n")


#: argparse's "invalid choice: 'VALUE' (choose from ...)": a long VALUE is cut so the line stays one line
_INVALID_CHOICE = re.compile(r"(invalid choice: )(['\"])(.*?)\2( \(choose from)", re.S)
_SHOWN_CHARS = 40


def _shorten_choice(message: str) -> str:
    def cut(m: re.Match[str]) -> str:
        value = m.group(3)
        if len(value) <= _SHOWN_CHARS:
            return m.group(0)
        return f"{m.group(1)}{m.group(2)}{value[:_SHOWN_CHARS]}...{m.group(2)} ({len(value):,} characters){m.group(4)}"

    return _INVALID_CHOICE.sub(cut, message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="vramlens",
        description="Will this model fit on my GPU, where did my memory go, and what should I change?",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example: vramlens estimate llama-2-7b --mode train --method lora --gpu A100-80GB",
    )
    parser.add_argument("--version", action="version", version=f"vramlens {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"vramlens.cli.{name}")
        except ModuleNotFoundError as e:  # a command whose module is not written yet
            if e.name == f"vramlens.cli.{name}":
                continue
            raise
        module.add_parser(sub)
    return parser


def _red(text: str) -> str:
    if sys.stderr.isatty() and not os.environ.get("NO_COLOR"):
        return f"\x1b[31m{text}\x1b[0m"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or argparse's one-line error (already printed)
        return e.code if isinstance(e.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        from vramlens.cli.render import check_output_paths

        check_output_paths(args)
        return int(args.func(args) or 0)
    except VramlensError as e:
        print(_red(f"error: {e}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(_red("interrupted"), file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
