"""How the commands show a result: rich on a terminal, plain text otherwise, report files.

rich is optional (the ``rich`` extra) and imported only here, when a terminal is there to use it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO


def rich_console(stream: TextIO | None = None):
    """A rich Console on ``stream`` (default stdout) when rich is installed and the stream is a
    terminal; else None. Colour is rich's own call (terminal kind, ``NO_COLOR``, ``TERM=dumb``)."""
    stream = stream or sys.stdout
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(file=stream, highlight=False)


def show(kind: str, data: Mapping | Callable[[], Mapping], plain: Callable[[], str], **view_kw: Any) -> None:
    """Print the rich view of ``kind`` on a terminal, else the plain text (byte for byte as before).

    Args:
        kind: "estimate", "fit", "trace" or "place" (see vramlens.report.rich_view.VIEWS).
        data: the command's JSON object, or a function making it (called only for rich).
        plain: makes the plain text.
        view_kw: passed to the view.
    """
    console = rich_console()
    if console is None:
        print(plain())
        return
    from vramlens.report.rich_view import VIEWS

    console.print(VIEWS[kind](data() if callable(data) else data, **view_kw))


def progress_bar(description: str, *, enabled: bool = True, delay: float = 1.0):
    """A rich progress bar on stderr (shown once the work takes ``delay`` s), or None when
    disabled, stderr is not a terminal or rich is missing."""
    if not enabled:
        return None
    console = rich_console(sys.stderr)
    if console is None:
        return None
    from vramlens.report.rich_view import TerminalProgress

    return TerminalProgress(console, description, delay=delay)


def add_file_args(p: argparse.ArgumentParser, chart: str) -> None:
    """``--html``, ``--svg`` and ``--png``; ``chart`` says what the SVG/PNG shows."""
    p.add_argument("--html", default=None, metavar="FILE",
                   help="also write a self-contained HTML report (opens offline)")
    p.add_argument("--svg", default=None, metavar="FILE", help=f"also write {chart} as SVG")
    p.add_argument("--png", default=None, metavar="FILE", help=f"also write {chart} as PNG (needs cairosvg)")


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse, before any work, report paths that cannot be written: a folder, or a file in a folder
    that does not exist (so that a long trace does not end in a write error)."""
    from pathlib import Path

    from vramlens.errors import InputError

    for flag in ("html", "svg", "png", "timeline"):
        value = getattr(args, flag, None)
        if not value:
            continue
        target = Path(value)
        if target.is_dir():
            raise InputError(f"--{flag} {value!r} is a folder: give a file path such as {flag}.{flag}")
        parent = target.parent if str(target.parent) else Path(".")
        if not parent.is_dir():
            raise InputError(f"--{flag} {value!r}: the folder {str(parent)!r} does not exist: create it first "
                             "or choose a file in an existing folder")


def wants_files(args: argparse.Namespace) -> bool:
    return any(getattr(args, k, None) for k in ("html", "svg", "png"))


def write_files(args: argparse.Namespace, kind: str, data: Mapping, *, headroom: float = 0.10) -> None:
    """Write the report files asked for, each atomically (PNG first: it is the one that can
    fail for a missing dependency, and then nothing is written)."""
    from vramlens.report.html import chart_svg, write_html, write_text_atomic

    if args.svg or args.png:
        chart = chart_svg(kind, data, headroom=headroom)
        if args.png:
            from vramlens.report.svg import svg_to_png

            write_text_atomic(args.png, svg_to_png(chart))
        if args.svg:
            write_text_atomic(args.svg, chart)
    if args.html:
        write_html(kind, data, args.html, headroom=headroom)


__all__ = ["add_file_args", "check_output_paths", "progress_bar", "rich_console", "show", "wants_files", "write_files"]
