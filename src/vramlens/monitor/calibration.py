"""Calibrate on the user's own device: measured peaks at two batch sizes (and two sequence lengths)
fitted to fixed + per-sample (+ quadratic in sequence), and the largest batch and sequence that fit.
Pure Python, no torch: :func:`fit` turns measured points into a :class:`Calibration`.

The model (per device, b samples of s tokens)::

    peak(b)    = F + b * p                          # batch sizes only
    peak(b, s) = F + b * (alpha * s + beta * s**2)  # with sequence lengths: eager attention keeps
                                                    # (b, heads, s, s) scores, hence the s**2 term

F is what does not grow with the batch (weights, gradients, optimizer state); p, alpha, beta come
from the differences between the measured peaks, so two batch sizes (times two sequence lengths)
are enough; an allocator's rounding makes the fit a little conservative or optimistic, which the
safety margin covers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vramlens.units import human_bytes


@dataclass(frozen=True, slots=True)
class Point:
    """One measured step: its batch size, sequence length (None when not varied) and peak bytes."""

    batch: int
    seq: int | None
    peak_bytes: int
    estimate_bytes: int | None = None   # vramlens' analytic peak allocated for the same step, when asked

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "seq": self.seq, "peak_bytes": self.peak_bytes,
                "estimate_bytes": self.estimate_bytes}


@dataclass(frozen=True, slots=True)
class Calibration:
    """What calibrate measured and what it answers.

    Attributes:
        points: the measured steps after the warm-up.
        fixed_bytes: F, the part of the peak that does not grow with the batch.
        per_sample_bytes: the peak's growth per sample at ``seq_ref`` (p).
        alpha_bytes, beta_bytes: per sample, bytes per token and per token squared (None without
            sequence lengths).
        seq_ref: the sequence length max_batch is for (the first of seq_lens; None without them).
        capacity_bytes: the device's capacity the answers are for (None: no answers).
        margin: the fraction of the capacity kept free.
        max_batch: the largest batch whose predicted peak fits in capacity * (1 - margin).
        max_seq: the largest sequence length that fits at the first batch size (None without seq_lens).
        notes: what could not be answered, one line each.
    """

    points: tuple[Point, ...]
    fixed_bytes: int
    per_sample_bytes: int
    alpha_bytes: float | None
    beta_bytes: float | None
    seq_ref: int | None
    capacity_bytes: int | None
    margin: float
    max_batch: int | None
    max_seq: int | None
    notes: tuple[str, ...] = ()

    @property
    def usable_bytes(self) -> int | None:
        return None if self.capacity_bytes is None else int(self.capacity_bytes * (1 - self.margin))

    def predict(self, batch: int, seq: int | None = None) -> int:
        """The fitted peak for ``batch`` samples (of ``seq`` tokens when sequence lengths were measured)."""
        if seq is None or self.alpha_bytes is None or self.beta_bytes is None:
            return self.fixed_bytes + batch * self.per_sample_bytes
        return self.fixed_bytes + math.ceil(batch * (self.alpha_bytes * seq + self.beta_bytes * seq * seq))

    def text(self) -> str:
        lines = ["vramlens calibrate: measured peaks"]
        for p in self.points:
            at = f"batch {p.batch}" + (f", seq {p.seq}" if p.seq is not None else "")
            est = ""
            if p.estimate_bytes is not None:
                diff = (p.estimate_bytes - p.peak_bytes) / p.peak_bytes * 100 if p.peak_bytes else 0.0
                est = f"   estimate {human_bytes(p.estimate_bytes)} ({diff:+.1f}%)"
            lines.append(f"  {at:<22} {human_bytes(p.peak_bytes):>12}{est}")
        fit = f"fit: fixed {human_bytes(self.fixed_bytes)} + {human_bytes(self.per_sample_bytes)} per sample"
        if self.alpha_bytes is not None and self.beta_bytes is not None:
            fit += (f" at seq {self.seq_ref} ({self.alpha_bytes:,.1f} B per token + "
                    f"{self.beta_bytes:,.3f} B per token squared)")
        lines.append(fit)
        if self.capacity_bytes is not None:
            lines.append(f"capacity {human_bytes(self.capacity_bytes)}, {self.margin:.0%} kept free: "
                         f"usable {human_bytes(self.usable_bytes or 0)}")
            if self.max_batch is not None:
                lines.append(f"max batch: {self.max_batch}" + (f" at seq {self.seq_ref}" if self.seq_ref else ""))
            if self.max_seq is not None:
                lines.append(f"max seq: {self.max_seq} at batch {self.points[0].batch}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"points": [p.to_dict() for p in self.points], "fixed_bytes": self.fixed_bytes,
                "per_sample_bytes": self.per_sample_bytes, "alpha_bytes": self.alpha_bytes,
                "beta_bytes": self.beta_bytes, "seq_ref": self.seq_ref, "capacity_bytes": self.capacity_bytes,
                "usable_bytes": self.usable_bytes, "margin": self.margin, "max_batch": self.max_batch,
                "max_seq": self.max_seq, "notes": list(self.notes)}


def check_sizes(name: str, values: tuple[int, ...] | None, *, required: bool) -> list[str]:
    """Problems with batch_sizes/seq_lens: two distinct whole numbers >= 1, smallest first."""
    if values is None:
        return [] if not required else [f"{name} is required: two sizes such as (1, 2)"]
    vals = tuple(values)
    if len(vals) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in vals) \
            or vals[0] >= vals[1]:
        return [f"{name}={vals!r} must be two whole numbers >= 1, smallest first, such as (1, 2)"]
    return []


def fit(points: list[Point] | tuple[Point, ...], *, capacity_bytes: int | None, margin: float = 0.1) -> Calibration:
    """Fit fixed + per-sample (+ alpha * s + beta * s**2 per sample) to the measured points.

    Args:
        points: two batch sizes at one sequence length (seq None), or the 2 x 2 grid of two batch
            sizes and two sequence lengths.
        capacity_bytes: the device's capacity; None leaves max_batch and max_seq unanswered.
        margin: fraction of the capacity kept free, in [0, 1).

    Returns:
        The Calibration.

    Raises:
        ValueError: points that are not two batch sizes (times two sequence lengths), or a bad margin.
    """
    if not 0 <= margin < 1:
        raise ValueError(f"margin={margin} must be in [0, 1): e.g. 0.1 keeps 10% of the capacity free")
    batches = sorted({p.batch for p in points})
    seqs = sorted({p.seq for p in points if p.seq is not None})
    if len(batches) != 2 or (seqs and (len(seqs) != 2 or len(points) != 4)) or (not seqs and len(points) != 2):
        raise ValueError(f"calibrate fits two batch sizes (times two sequence lengths); got {len(points)} points "
                         f"at batch sizes {batches} and sequence lengths {seqs}")
    b1, b2 = batches
    notes: list[str] = []
    peak = {(p.batch, p.seq): p.peak_bytes for p in points}
    if not seqs:
        per = (peak[(b2, None)] - peak[(b1, None)]) / (b2 - b1)
        fixed = peak[(b1, None)] - b1 * per
        alpha = beta = None
        seq_ref = None
    else:
        s1, s2 = seqs
        slope = {s: (peak[(b2, s)] - peak[(b1, s)]) / (b2 - b1) for s in seqs}
        fixed = sum(peak[(b1, s)] - b1 * slope[s] for s in seqs) / 2
        # alpha * s + beta * s**2 = slope(s) at s1 and s2
        beta = (slope[s2] / s2 - slope[s1] / s1) / (s2 - s1)
        alpha = slope[s1] / s1 - beta * s1
        if beta < 0:  # memory that grows less than linearly in s: keep the linear bound, which over-predicts
            notes.append("the per-sample peak grows less than linearly in sequence length: fitted as linear")
            beta, alpha = 0.0, max(slope[s1] / s1, slope[s2] / s2)
        seq_ref = s1
        per = alpha * s1 + beta * s1 * s1
    per_sample = math.ceil(per)
    fixed_bytes = max(0, math.ceil(fixed))
    max_batch = max_seq = None
    if capacity_bytes is None:
        notes.append("no capacity given: pass gpu= or capacity_bytes= for max_batch and max_seq")
    else:
        usable = int(capacity_bytes * (1 - margin))
        if per_sample <= 0:
            notes.append("the peak does not grow with the batch size here: no largest batch to answer")
        elif usable < fixed_bytes + per_sample:
            max_batch = 0
            notes.append(f"not even one sample fits: {human_bytes(fixed_bytes)} fixed + "
                         f"{human_bytes(per_sample)} per sample over {human_bytes(usable)} usable")
        else:
            max_batch = (usable - fixed_bytes) // per_sample
        if seqs and alpha is not None and beta is not None:
            max_seq = _max_seq(usable - fixed_bytes, b1, alpha, beta)
    return Calibration(tuple(points), fixed_bytes, per_sample, alpha, beta, seq_ref, capacity_bytes, margin,
                       max_batch, max_seq, tuple(notes))


def _max_seq(room: float, b: int, alpha: float, beta: float) -> int | None:
    """The largest s with b * (alpha * s + beta * s**2) <= room."""
    if room <= 0:
        return 0
    a, c = b * beta, b * alpha
    if a <= 0:
        return None if c <= 0 else int(room // c)
    s = int((-c + math.sqrt(c * c + 4 * a * room)) / (2 * a))
    while s > 0 and a * s * s + c * s > room:
        s -= 1
    return s
