"""Replay a snapshot's recorded history through the simulator and compare with what was recorded.

``alloc`` entries become allocations (the block address names the allocation, the requested
size is the size), ``free_completed`` entries their frees (``free_requested`` is when the
program let go; the memory is reusable only once the free completes). A ``segment_free`` or
``segment_unmap`` that is not followed by a ``segment_alloc``/``segment_map`` of the same
malloc is an ``empty_cache()``; those inside a malloc (its out-of-memory retry) the simulator
does by itself when given the capacity.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from vramlens.allocator.config import AllocatorConfig
from vramlens.allocator.events import Event
from vramlens.allocator.result import AllocatorResult
from vramlens.allocator.simulator import simulate
from vramlens.allocator.snapshot import analyze_snapshot
from vramlens.errors import SnapshotError


def trace_to_events(entries: list[Any]) -> list[Event]:
    """Events for the simulator from one device's trace entries (see the module docstring)."""
    events: list[Event] = []
    released = False  # segments went back to CUDA since the last allocation or free
    for e in entries:
        if not isinstance(e, dict):
            continue
        action = e.get("action")
        if action in ("segment_free", "segment_unmap"):
            released = True
        elif action in ("alloc", "free_completed"):
            if released:
                events.append(Event(None, 0, "empty_cache"))
                released = False
            if action == "alloc":
                events.append(Event(e.get("addr"), int(e.get("size", 0)), "alloc", e.get("stream", 0)))
            else:
                events.append(Event(e.get("addr"), 0, "free", e.get("stream", 0)))
    if released:
        events.append(Event(None, 0, "empty_cache"))
    return events


@dataclass(frozen=True, slots=True)
class ReplayComparison:
    """The simulator against a recorded snapshot.

    Attributes:
        result: the simulator's result.
        recorded_reserved_bytes / simulated_reserved_bytes: reserved at the end.
        recorded_peak_reserved_bytes / simulated_peak_reserved_bytes: peaks over the window.
        recorded_segments / simulated_segments: segment sizes at the end, size -> count.
        complete: whether the history covers the run from an empty allocator (otherwise the
            simulator starts empty while the real allocator did not, and only the peaks of the
            window are comparable).
        peak_reserved_error: simulated / recorded - 1.
    """

    result: AllocatorResult
    recorded_reserved_bytes: int
    simulated_reserved_bytes: int
    recorded_peak_reserved_bytes: int
    simulated_peak_reserved_bytes: int
    recorded_segments: dict[int, int]
    simulated_segments: dict[int, int]
    complete: bool

    @property
    def peak_reserved_error(self) -> float:
        rec = self.recorded_peak_reserved_bytes
        return self.simulated_peak_reserved_bytes / rec - 1 if rec else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "recorded_reserved_bytes": self.recorded_reserved_bytes,
            "simulated_reserved_bytes": self.simulated_reserved_bytes,
            "recorded_peak_reserved_bytes": self.recorded_peak_reserved_bytes,
            "simulated_peak_reserved_bytes": self.simulated_peak_reserved_bytes,
            "peak_reserved_error": self.peak_reserved_error,
            "recorded_segments": {str(k): v for k, v in sorted(self.recorded_segments.items())},
            "simulated_segments": {str(k): v for k, v in sorted(self.simulated_segments.items())},
            "complete": self.complete,
            "simulated_peak_allocated_bytes": self.result.peak_allocated_bytes,
        }


def replay_snapshot(snap: dict[str, Any], *, conf: AllocatorConfig | str | None = None, capacity: int | None = None,
                    device: int = 0) -> ReplayComparison:
    """Replay ``snap``'s device_traces[device] and compare with its segments.

    Args:
        snap: an unpickled snapshot (see :func:`vramlens.allocator.snapshot.safe_loads`).
        conf: allocator settings; default: those recorded in the snapshot.
        capacity: bytes the allocator could use, to replay out-of-memory retries.
        device: which device's history.

    Raises:
        SnapshotError: no history was recorded for that device.
    """
    report = analyze_snapshot(snap, device=device)
    traces = snap.get("device_traces") or []
    if device >= len(traces) or not traces[device] or report.history is None:
        raise SnapshotError("no allocation history in this snapshot: record one with "
                            "torch.cuda.memory._record_memory_history(max_entries=...)")
    if conf is None:
        conf = report.config or AllocatorConfig()
    result = simulate(trace_to_events(traces[device]), conf, capacity)
    recorded = Counter(s["total_size"] for s in snap["segments"] if s.get("device", 0) == device)
    simulated = Counter(result.final_segment_sizes)
    return ReplayComparison(
        result=result,
        recorded_reserved_bytes=report.reserved_bytes,
        simulated_reserved_bytes=result.final_reserved_bytes,
        recorded_peak_reserved_bytes=report.history.peak_reserved_bytes,
        simulated_peak_reserved_bytes=result.peak_reserved_bytes + report.history.baseline_reserved_bytes,
        recorded_segments=dict(recorded),
        simulated_segments=dict(simulated),
        complete=report.history.complete,
    )
