"""Invariants of the allocator simulator over random event lists (hypothesis)."""

import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis (the dev extra)")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vramlens.allocator import simulate  # noqa: E402

MiB = 1024 * 1024


def A(i, size, stream=0):
    return ("alloc", i, size, stream)


def F(i):
    return ("free", i, 0)


EMPTY = ("empty_cache", None, 0)


event_lists = st.lists(
    st.tuples(st.booleans(), st.integers(0, 15), st.integers(1, 40 * MiB), st.integers(0, 1)), max_size=60)


def _events(spec):
    out, live = [], set()
    for is_alloc, ident, size, stream in spec:
        if is_alloc or ident not in live:
            out.append(A(ident, size, stream))
            live.add(ident)
        else:
            out.append(F(ident))
            live.discard(ident)
    return out, live


@settings(max_examples=150, deadline=None)
@given(spec=event_lists, conf=st.sampled_from([None, "expandable_segments:True", "max_split_size_mb:21",
                                               "roundup_power2_divisions:4"]))
def test_invariants(spec, conf):
    events, live = _events(spec)
    r = simulate(events, conf, max_points=10_000)
    assert all(res >= alloc for _, alloc, res in r.timeline.points)
    assert r.peak_reserved_bytes >= r.peak_allocated_bytes >= r.peak_requested_bytes
    # free everything still live, then empty_cache: nothing stays reserved
    r = simulate(events + [F(i) for i in live] + [EMPTY], conf)
    assert (r.final_allocated_bytes, r.final_reserved_bytes, r.final_segments) == (0, 0, 0)


@settings(max_examples=80, deadline=None)
@given(spec=event_lists, cap_mib=st.integers(20, 120))
def test_capacity_is_never_exceeded(spec, cap_mib):
    events, _ = _events(spec)
    for conf in (None, "expandable_segments:True"):
        r = simulate(events, conf, capacity=cap_mib * MiB)
        assert r.peak_reserved_bytes <= cap_mib * MiB
        assert all(o.reserved_bytes <= cap_mib * MiB for o in r.oom_events)
