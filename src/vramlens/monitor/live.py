"""The live line: current and peak memory against capacity on stderr, redrawn in place (rich).

Shown only when the stream is a terminal (a log file or a pipe gets nothing) and rich is
installed; redrawn at most every ``min_interval_s`` so that a fast loop pays one clock read per step.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from vramlens.units import human_bytes

#: Redraws per second at most: a person reads a few a second, a loop may step thousands.
MIN_INTERVAL_S = 0.25


class LiveLine:
    """One progress line; ``update`` at each step, ``close`` at the end.

    Args:
        capacity_bytes: what the bar is out of (None: no bar, only the figures).
        stream: where to draw (default stderr); nothing is drawn unless it is a terminal.
    """

    def __init__(self, capacity_bytes: int | None, stream: TextIO | None = None,
                 min_interval_s: float = MIN_INTERVAL_S):
        self.capacity_bytes = capacity_bytes
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval_s = min_interval_s
        self._last = float("-inf")
        self._live: Any = None
        isatty = getattr(self.stream, "isatty", None)
        if not (callable(isatty) and isatty()):
            return
        try:
            from rich.console import Console
            from rich.live import Live
        except ImportError:  # the rich extra is not installed: stay silent
            return
        self._console = Console(file=self.stream, force_terminal=True)
        self._live = Live(console=self._console, auto_refresh=False, transient=False)
        self._live.start()

    @property
    def active(self) -> bool:
        return self._live is not None

    def line(self, step: int, current: int, peak: int) -> str:
        """The text of the line (plain, for tests and logs)."""
        text = f"vramlens step {step}: {human_bytes(current)} now, peak {human_bytes(peak)}"
        if self.capacity_bytes:
            text += f" of {human_bytes(self.capacity_bytes)} ({peak / self.capacity_bytes:.0%})"
        return text

    def update(self, step: int, current: int, peak: int, *, force: bool = False) -> None:
        if self._live is None:
            return
        now = time.monotonic()
        if not force and now - self._last < self.min_interval_s:
            return
        self._last = now
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        row = Table.grid(padding=(0, 1))
        cells: list[Any] = [self.line(step, current, peak)]
        if self.capacity_bytes:
            cells.insert(0, ProgressBar(total=self.capacity_bytes, completed=min(peak, self.capacity_bytes), width=20))
        for _ in cells:
            row.add_column(no_wrap=True)
        row.add_row(*cells)
        self._live.update(row, refresh=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
