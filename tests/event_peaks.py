"""The peak of a tracer's event list, shared by the tests that trace one module call under fake tensors."""

from __future__ import annotations


def peak_beyond(events, tag: str) -> int:
    """The most bytes alive at once among the recorded allocations not marked ``tag`` (the inputs a test marks)."""
    live = peak = 0
    for ev in events:
        if ev.tag == tag:
            continue
        live += ev.nbytes if ev.action == "alloc" else -ev.nbytes
        peak = max(peak, live)
    return peak
