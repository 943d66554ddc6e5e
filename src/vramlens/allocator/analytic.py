"""First-order reserved memory for the estimator: no replay, microseconds per call.

The estimator knows which tensors live all step (weights, gradients, optimizer states, KV
cache) and how many bytes of short-lived ones (activations, temporaries) are live at the peak,
but not the order of every allocation. This model applies the allocator's size rules exactly
to what it knows and a documented allowance to what it does not:

1. **Persistent tensors** (allocated once, in order, never freed): each is rounded to its block
   (:func:`~vramlens.allocator.simulator.round_size`). Blocks over 1 MiB and under 10 MiB share
   20 MiB segments, filled in turn; blocks of 10 MiB or more get a segment of their own rounded
   up to 2 MiB; small blocks (<= 1 MiB) pack into 2 MiB segments. This is what the simulator does
   for a stream of allocations without frees, except for the < 1 MiB tail the large pool does not
   split off, which is ignored (at most 1 MiB per 20 MiB segment).
2. **Short-lived tensors**: they are freed and allocated again every step, and the segments they
   leave behind are cached. At the peak the reservation for them is their live bytes plus the
   cached pieces too small or on the wrong side of a live block to serve the peak's requests.
   That share is ``transient_fragmentation`` (default TRANSIENT_FRAGMENTATION) of the live
   short-lived bytes, plus one partly used segment per size class (20 MiB + 2 MiB).
   With ``expandable_segments`` the cached pieces can grow into one another: the share is
   EXPANDABLE_FRAGMENTATION instead and the slack is one page per pool.

What it cannot see: allocations on several streams, tensors that outlive their step (a
leaked reference), and sizes that change from step to step (dynamic shapes), all of which the
simulator replays exactly when a trace is available.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vramlens.allocator.config import AllocatorConfig
from vramlens.allocator.simulator import (
    K_LARGE_BUFFER,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    round_size,
)

#: Cached-but-unusable share of the short-lived bytes at the peak. Derived by replaying traced
#: training steps through the simulator (tests/allocator/test_analytic.py regenerates the
#: figure): GPT-2-style and BERT-style steps at several batch sizes gave 3-9%; we take 8%.
TRANSIENT_FRAGMENTATION = 0.08
#: The same with expandable_segments:True, which lets freed pieces coalesce across the old
#: segment boundaries (same replays: 0-3%).
EXPANDABLE_FRAGMENTATION = 0.03


def _round2m(n: int) -> int:
    return -(-n // K_ROUND_LARGE) * K_ROUND_LARGE


def _items(sizes: Sequence[int] | Mapping[int, int]) -> list[tuple[int, int]]:
    if isinstance(sizes, Mapping):
        return [(int(s), int(c)) for s, c in sizes.items() if c and s]
    return [(int(s), 1) for s in sizes if s]


def persistent_reserved(sizes: Sequence[int] | Mapping[int, int], conf: AllocatorConfig | None = None) -> int:
    """Bytes reserved for tensors allocated once and kept (see rule 1 of the module docstring).

    Args:
        sizes: the tensors' byte sizes, or a mapping size -> count (much faster for models whose
            layers repeat).
        conf: allocator settings (their roundup_power2_divisions matter).
    """
    conf = conf or AllocatorConfig()
    small = mid = large = 0
    for size, count in _items(sizes):
        block = round_size(size, conf)
        if block <= K_SMALL_SIZE:
            small += block * count
        elif block < K_MIN_LARGE_ALLOC:
            mid += block * count
        else:
            large += _round2m(block) * count
    if conf.expandable_segments:  # one segment per pool, grown page by page
        return -(-small // K_SMALL_BUFFER) * K_SMALL_BUFFER + -(-(mid + large) // K_LARGE_BUFFER) * K_LARGE_BUFFER
    return (-(-small // K_SMALL_BUFFER) * K_SMALL_BUFFER + -(-mid // K_LARGE_BUFFER) * K_LARGE_BUFFER + large)


@dataclass(frozen=True, slots=True)
class ReservedEstimate:
    """The first-order reserved figure and its parts, bytes.

    Attributes:
        persistent_bytes: reserved for tensors kept all step (rule 1).
        transient_bytes: reserved for short-lived tensors at the peak (rule 2).
        reserved_bytes: their sum, never below the allocated peak.
        explain: the rule applied, in one line.
    """

    persistent_bytes: int
    transient_bytes: int
    reserved_bytes: int
    explain: str


def reserved_breakdown(
    persistent: Sequence[int] | Mapping[int, int] = (),
    transient_peak_bytes: int = 0,
    *,
    conf: AllocatorConfig | None = None,
    transient_fragmentation: float | None = None,
) -> ReservedEstimate:
    """Reserved memory at the peak from the tensors live there; see the module docstring.

    Args:
        persistent: sizes (or size -> count) of the tensors that live all step.
        transient_peak_bytes: bytes of short-lived tensors live at the peak.
        conf: allocator settings (expandable_segments changes the allowance).
        transient_fragmentation: override of the cached-but-unusable share.
    """
    conf = conf or AllocatorConfig()
    pers = persistent_reserved(persistent, conf)
    if transient_fragmentation is None:
        transient_fragmentation = EXPANDABLE_FRAGMENTATION if conf.expandable_segments else TRANSIENT_FRAGMENTATION
    if transient_peak_bytes > 0:
        slack = K_LARGE_BUFFER if conf.expandable_segments else K_LARGE_BUFFER + K_SMALL_BUFFER
        trans = _round2m(int(transient_peak_bytes * (1 + transient_fragmentation))) + slack
    else:
        trans = 0
    allocated_floor = sum(round_size(s, conf) * c for s, c in _items(persistent)) + transient_peak_bytes
    total = max(pers + trans, allocated_floor)
    explain = (f"persistent tensors packed by the allocator's segment rules; short-lived "
               f"{transient_peak_bytes:,} B x (1 + {transient_fragmentation:.2f}) + one partly used segment")
    return ReservedEstimate(pers, trans, total, explain)


def estimate_reserved(
    persistent: Sequence[int] | Mapping[int, int] = (),
    transient_peak_bytes: int = 0,
    *,
    conf: AllocatorConfig | None = None,
    transient_fragmentation: float | None = None,
) -> int:
    """torch.cuda.max_memory_reserved() predicted from the tensors live at the peak.

    Same arguments as :func:`reserved_breakdown`; returns only the total, bytes.
    """
    return reserved_breakdown(persistent, transient_peak_bytes, conf=conf,
                              transient_fragmentation=transient_fragmentation).reserved_bytes
