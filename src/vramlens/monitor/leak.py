"""Leak detection: a robust slope of the memory left alive after each optimizer step (pure Python).

A training loop without a leak leaves the same bytes alive after every optimizer step once the
optimizer state exists (step 2 on). The series measured is what survives from earlier steps
(tensors allocated in step k and still alive after step k + 1, outside the parameter, gradient
and optimizer registries): inputs that grow are allocated in the current step, so they do not
count, and a leak shows as a line with a positive slope.

The slope is Theil-Sen's (Sen, "Estimates of the regression coefficient based on Kendall's tau",
JASA 1968): the median of the pairwise slopes, so one odd step (a checkpoint save, an eval
batch) moves it little.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Steps left out at the start: step 1 creates the optimizer state, step 2 is the first steady one.
WARMUP_STEPS = 2
#: Points the slope is fitted on (the most recent ones).
WINDOW = 32
#: Fewest points before a slope is trusted.
MIN_POINTS = 8
#: Smallest slope reported: below this a "leak" is a scalar a step (4 B for a float32 loss),
#: which takes millions of steps to matter.
MIN_BYTES_PER_STEP = 1024


def theil_sen(ys: Sequence[float], xs: Sequence[float] | None = None) -> float:
    """The median of the slopes between every pair of points (0.0 for fewer than two points)."""
    xs = list(range(len(ys))) if xs is None else list(xs)
    slopes = sorted((ys[j] - ys[i]) / (xs[j] - xs[i])
                    for i in range(len(ys)) for j in range(i + 1, len(ys)) if xs[j] != xs[i])
    if not slopes:
        return 0.0
    mid = len(slopes) // 2
    return float(slopes[mid]) if len(slopes) % 2 else (slopes[mid - 1] + slopes[mid]) / 2


@dataclass(frozen=True, slots=True)
class Growth:
    """A series that grows: its slope and the steps it was fitted on."""

    bytes_per_step: int
    first_step: int
    last_step: int


def find_growth(steps: Sequence[int], values: Sequence[int], *, warmup: int = WARMUP_STEPS, window: int = WINDOW,
                min_points: int = MIN_POINTS, min_bytes_per_step: int = MIN_BYTES_PER_STEP) -> Growth | None:
    """Whether ``values`` (bytes after each of ``steps``) grow steadily.

    Growth needs a Theil-Sen slope of at least ``min_bytes_per_step`` over the last ``window``
    points after ``warmup`` steps and over the window's second half alone (a step up followed by
    a plateau is not a leak), and the series must have risen over the window by at least half of
    what the slope says.

    Returns:
        The growth, or None.
    """
    points = [(s, v) for s, v in zip(steps, values) if s > warmup][-window:]
    if len(points) < min_points:
        return None
    xs = [s for s, _ in points]
    ys = [v for _, v in points]
    slope = theil_sen(ys, xs)
    if slope < min_bytes_per_step:
        return None
    rise = ys[-1] - ys[0]
    if rise < slope * (xs[-1] - xs[0]) / 2:
        return None
    half = len(points) // 2
    if theil_sen(ys[half:], xs[half:]) < min_bytes_per_step:  # it must still grow: a step up then a plateau is not a leak
        return None
    return Growth(int(round(slope)), xs[0], xs[-1])


def is_rising(steps: Sequence[int], values: Sequence[int], *, warmup: int = WARMUP_STEPS,
              min_bytes_per_step: int = MIN_BYTES_PER_STEP) -> bool:
    """A cheap early sign (three points suffice) that turns on the second pass: allocation stacks."""
    return find_growth(steps, values, warmup=warmup, min_points=3, min_bytes_per_step=min_bytes_per_step) is not None
