"""What a replay produces: AllocatorResult, its timeline and its out-of-memory events."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from vramlens.allocator.config import AllocatorConfig
from vramlens.units import ceil_div


@dataclass(frozen=True, slots=True)
class OOMEvent:
    """A request that failed after every retry (cache freed, allocation retried).

    Attributes:
        index: position of the event in the stream.
        size: bytes requested (before rounding).
        stream: the request's stream.
        allocated_bytes / reserved_bytes: the allocator's totals when it failed (after its own
            release of cached segments, as PyTorch reports them).
        capacity_bytes: memory the allocator could have had.
        fragmented: True when capacity minus allocated was at least the request: enough memory
            was free in total, but not in one piece the allocator could use.
    """

    index: int
    size: int
    stream: int
    allocated_bytes: int
    reserved_bytes: int
    capacity_bytes: int
    fragmented: bool


@dataclass(frozen=True, slots=True)
class Timeline:
    """allocated and reserved bytes after each event, compressed to at most a few thousand points.

    Each point is ``(event_index, allocated_bytes, reserved_bytes)``; where several events share
    a bucket the point keeps the bucket's largest values, so peaks survive compression.
    """

    points: tuple[tuple[int, int, int], ...]
    n_events: int

    @staticmethod
    def from_arrays(allocated: array[int], reserved: array[int], max_points: int = 2048) -> Timeline:
        n = len(allocated)
        if n <= max_points:
            return Timeline(tuple((i, allocated[i], reserved[i]) for i in range(n)), n)
        step = ceil_div(n, max_points)
        pts = []
        for start in range(0, n, step):
            stop = min(start + step, n)
            pts.append((stop - 1, max(allocated[start:stop]), max(reserved[start:stop])))
        return Timeline(tuple(pts), n)


@dataclass(frozen=True, slots=True)
class AllocatorResult:
    """The simulated allocator's figures for one event stream.

    Attributes:
        peak_reserved_bytes: torch.cuda.max_memory_reserved().
        peak_allocated_bytes: torch.cuda.max_memory_allocated() (block sizes, i.e. after rounding).
        peak_requested_bytes: the largest sum of requested sizes (before rounding).
        allocated_at_peak_reserved: allocated bytes when reserved peaked.
        fragmentation_bytes: reserved minus allocated at the reserved peak: cached but not in use.
        inactive_split_bytes_at_peak: of that, free pieces of segments still partly in use, which
            empty_cache cannot return (PyTorch's inactive_split_bytes).
        largest_free_block_at_peak: the largest cached free block at the reserved peak.
        segments_at_peak: segments (cudaMalloc calls, or expandable segments) at the reserved peak.
        final_*: the same at the end of the stream.
        num_alloc_retries / num_ooms / num_device_alloc / num_device_free: PyTorch's counters.
        oom_events: every failed request (only with a capacity).
        timeline: allocated/reserved over the events.
        n_events: events replayed.
        capacity_bytes: the memory the allocator was given, None for unlimited.
        config: the allocator settings used.
        final_segment_sizes: sizes of the segments at the end, largest first (an expandable
            segment counts once per mapped range, as a snapshot lists it).
    """

    peak_reserved_bytes: int
    peak_allocated_bytes: int
    peak_requested_bytes: int
    allocated_at_peak_reserved: int
    fragmentation_bytes: int
    inactive_split_bytes_at_peak: int
    largest_free_block_at_peak: int
    segments_at_peak: int
    final_reserved_bytes: int
    final_allocated_bytes: int
    final_largest_free_block: int
    final_segments: int
    num_alloc_retries: int
    num_ooms: int
    num_device_alloc: int
    num_device_free: int
    oom_events: tuple[OOMEvent, ...]
    timeline: Timeline
    n_events: int
    capacity_bytes: int | None
    config: AllocatorConfig = field(default_factory=AllocatorConfig)
    final_segment_sizes: tuple[int, ...] = ()

    @property
    def fragmentation_ratio(self) -> float:
        """Share of the peak reservation not in use at that moment."""
        return self.fragmentation_bytes / self.peak_reserved_bytes if self.peak_reserved_bytes else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (bytes as ints)."""
        return {
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_requested_bytes": self.peak_requested_bytes,
            "allocated_at_peak_reserved": self.allocated_at_peak_reserved,
            "fragmentation_bytes": self.fragmentation_bytes,
            "inactive_split_bytes_at_peak": self.inactive_split_bytes_at_peak,
            "largest_free_block_at_peak": self.largest_free_block_at_peak,
            "segments_at_peak": self.segments_at_peak,
            "final_reserved_bytes": self.final_reserved_bytes,
            "final_allocated_bytes": self.final_allocated_bytes,
            "final_largest_free_block": self.final_largest_free_block,
            "final_segments": self.final_segments,
            "num_alloc_retries": self.num_alloc_retries,
            "num_ooms": self.num_ooms,
            "num_device_alloc": self.num_device_alloc,
            "num_device_free": self.num_device_free,
            "oom_events": [
                {"index": o.index, "size": o.size, "stream": o.stream, "allocated_bytes": o.allocated_bytes,
                 "reserved_bytes": o.reserved_bytes, "capacity_bytes": o.capacity_bytes,
                 "fragmented": o.fragmented}
                for o in self.oom_events
            ],
            "n_events": self.n_events,
            "capacity_bytes": self.capacity_bytes,
            "alloc_conf": self.config.text,
            "final_segment_sizes": list(self.final_segment_sizes),
        }
