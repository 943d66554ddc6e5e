"""The first-order reserved model: exact for kept tensors, calibrated for short-lived ones."""

import random

import pytest

from vramlens.allocator.analytic import (
    TRANSIENT_FRAGMENTATION,
    estimate_reserved,
    persistent_reserved,
    reserved_breakdown,
)
from vramlens.allocator.config import AllocatorConfig
from vramlens.allocator.simulator import CachingAllocator, round_size

MiB = 1024 * 1024


def test_persistent_packing_by_hand():
    assert persistent_reserved([1000, 1000, 1000]) == 2 * MiB  # 3 x 1024 B in one small segment
    assert persistent_reserved([5 * MiB, 3 * MiB]) == 20 * MiB  # both in one 20 MiB segment
    # 8 MiB x 5: two per 20 MiB segment (4 MiB left cannot hold a third): 3 segments
    assert persistent_reserved([8 * MiB] * 5) == persistent_reserved({8 * MiB: 5}) == 60 * MiB
    assert persistent_reserved([30 * MiB + 1]) == 32 * MiB  # 30 MiB + 512 -> rounded up to 2 MiB
    # expandable: pools grow by pages: 40 MiB of large blocks = two 20 MiB pages
    assert persistent_reserved([8 * MiB] * 5, AllocatorConfig.parse("expandable_segments:True")) == 40 * MiB


def test_small_figures():
    # 512 B live: one 2 MiB small segment, no 22 MiB allowance for a handful of bytes
    assert estimate_reserved((), 512) == 2 * MiB
    r = reserved_breakdown([16 * MiB] * 4, 1000 * MiB)
    assert r.persistent_bytes == 64 * MiB
    # 1000 MiB x 1.09 + 22 MiB = 1112 MiB, already a multiple of 2 MiB
    assert r.transient_bytes == 1112 * MiB
    assert r.reserved_bytes == 64 * MiB + 1112 * MiB


def _replay_peak(events):
    """Simulated peak reserved and the live set then, split into kept and short-lived tensors."""
    a, live, peak, at_peak = CachingAllocator(), {}, -1, set()
    for act, i, s in events:
        if act == "alloc":
            live[i] = a.malloc(s, 0)
        elif i in live:
            a.free(live.pop(i))
        if a.reserved > peak:
            peak, at_peak = a.reserved, set(live)
    return peak, at_peak


@pytest.mark.parametrize("d, batch, seq", [(512, 4, 256), (768, 2, 512), (1024, 8, 128)])
def test_analytic_model_follows_traced_training_steps(d, batch, seq):
    pytest.importorskip("torch", reason="the training steps are traced with torch (the trace extra)")
    from alloc_tracing import transformer_step_events

    events, persistent_ids = transformer_step_events(d=d, batch=batch, seq=seq)
    size = {i: s for a, i, s in events if a == "alloc"}
    peak, live = _replay_peak(events)
    kept = [size[i] for i in sorted(live) if i in persistent_ids]
    short = sum(round_size(size[i]) for i in live if i not in persistent_ids)
    estimate = estimate_reserved(kept, short)
    # the documented spread of the short-lived allowance bounds the error: without checkpointing the derivation's
    # shares run from -0.5% to 22.9% around the 9% taken (scripts/derive_fragmentation.py)
    assert abs(estimate - peak) <= 0.15 * short + 24 * MiB, (estimate, peak, short)
    assert 0 < TRANSIENT_FRAGMENTATION < 0.2


def test_random_sizes_are_never_below_allocated():
    rng = random.Random(0)
    for _ in range(100):
        kept = [rng.randint(1, 50 * MiB) for _ in range(rng.randint(0, 20))]
        short = rng.randint(0, 500 * MiB)
        assert estimate_reserved(kept, short) >= sum(round_size(s) for s in kept) + short
