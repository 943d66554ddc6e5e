"""A search's time budget: searches stop when it runs out and return the best found so far.

`fit`, the inverse questions and `place` check the budget between units of work (a structure of
the training search, a layout of the inference search, one evaluation of a bisection, one round
of placement), so at least one unit always runs and a budget of 0 examines exactly one: tests
exercise the partial path with ``budget_s=0`` instead of timing anything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from vramlens.errors import InputError
from vramlens.limits import SEARCH_BUDGET_S


@dataclass(frozen=True, slots=True)
class Budget:
    """Seconds a search may run, from ``start`` on the monotonic clock."""

    seconds: float
    start: float

    @classmethod
    def begin(cls, seconds: float | None = SEARCH_BUDGET_S) -> Budget:
        """A budget starting now (``None``: the default, vramlens.limits.SEARCH_BUDGET_S).

        Raises:
            InputError: a negative or non-finite budget.
        """
        s = SEARCH_BUDGET_S if seconds is None else seconds
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 <= s < float("inf"):
            raise InputError(f"budget_s={s!r} must be a number of seconds >= 0 (default {SEARCH_BUDGET_S:g})")
        return cls(float(s), time.monotonic())

    def spent(self) -> bool:
        return time.monotonic() - self.start >= self.seconds

    def remaining(self) -> float:
        return max(0.0, self.seconds - (time.monotonic() - self.start))


def stopped_line(budget_s: float, examined: int, total: int, what: str = "candidates") -> str:
    """The one line every partial answer shows."""
    return (f"search stopped after {budget_s:g} s: {examined:,} of {total:,} {what} examined; "
            "the plans shown are the best found so far")
