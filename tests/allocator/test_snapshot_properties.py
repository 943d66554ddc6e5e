"""Snapshot properties with Hypothesis: analyze_history gives what the old quadratic walk gave (kept here
as the reference), and fuzzed pickles and memory_stats give a report or a vramlens error."""

from __future__ import annotations

import json
import pickle
from collections import Counter, defaultdict

import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis (the dev extra)")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_snapshot_hostile import STATS, MiB  # noqa: E402

from vramlens.allocator.config import AllocatorConfig  # noqa: E402
from vramlens.allocator.simulator import round_size  # noqa: E402
from vramlens.allocator.snapshot import analyze_history, frame_label, load_report  # noqa: E402
from vramlens.errors import VramlensError  # noqa: E402


# ---- analyze_history: linear, and the same answer as the old walk -----------------------------------
def old_analyze_history(entries, final_allocated, final_reserved, conf=None, top=10):
    """The quadratic walk analyze_history replaced (it copied the live set at every new peak)."""
    conf = conf or AllocatorConfig()
    live = {}
    alloc = req = res = 0
    points = []
    peak_a = peak_r = peak_q = 0
    peak_live = {}
    for i, e in enumerate(entries):
        action = e.get("action")
        if action in ("oom", "snapshot", "user_defined", "free_requested"):
            continue
        size, addr = e["size"], e.get("addr")
        if action == "alloc":
            block = round_size(size, conf) if size else 0
            live[addr] = (block, size, frame_label(e.get("frames")))
            alloc += block
            req += size
        elif action == "free_completed":
            block, size_req, _ = live.pop(addr, (round_size(size, conf) if size else 0, size, ""))
            alloc -= block
            req -= size_req
        elif action in ("segment_alloc", "segment_map"):
            res += size
        elif action in ("segment_free", "segment_unmap"):
            res -= size
        if alloc > peak_a:
            peak_a = alloc
            peak_live = dict(live)
        peak_q = max(peak_q, req)
        peak_r = max(peak_r, res)
        points.append((i, alloc, res))
    base_a, base_r = max(0, final_allocated - alloc), max(0, final_reserved - res)
    top_b, top_n = defaultdict(int), Counter()
    for block, _, label in peak_live.values():
        top_b[label] += block
        top_n[label] += 1
    tops = sorted(top_b.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    step = max(1, len(points) // 2048)
    return (peak_a + base_a, peak_q, max(peak_r + base_r, final_reserved), base_a, base_r,
            tuple((i, a + base_a, r + base_r) for i, a, r in points[::step]),
            tuple((k, b, top_n[k]) for k, b in tops))


ACTIONS = ["alloc", "alloc", "alloc", "free_completed", "free_completed", "free_requested", "segment_alloc",
           "segment_free", "oom", "snapshot"]


@st.composite
def histories(draw):
    n = draw(st.integers(0, 60))
    out = []
    for _ in range(n):
        action = draw(st.sampled_from(ACTIONS))
        out.append({"action": action, "addr": draw(st.integers(0, 8)) * 4096,
                    "size": draw(st.sampled_from([0, 1, 512, 513, 1 << 20, 3 << 20, 11 << 20])),
                    "device_free": 0, "frames": [{"filename": f"f{draw(st.integers(0, 3))}.py", "line": 1, "name": "g"}]})
    return out


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 64 << 20), st.integers(0, 64 << 20))
def test_history_equals_the_old_walk(entries, final_a, final_r):
    h = analyze_history(entries, final_a, final_r, top=3)
    got = (h.peak_allocated_bytes, h.peak_requested_bytes, h.peak_reserved_bytes, h.baseline_allocated_bytes,
           h.baseline_reserved_bytes, h.timeline, tuple((f.frame, f.bytes, f.count) for f in h.top_frames_at_peak))
    assert got == old_analyze_history(entries, final_a, final_r, top=3)


# ---- fuzzing: pickles and memory_stats ----------------------------------------------------------------
numbers = st.one_of(st.integers(-2**70, 2**70), st.just(10**400), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, 512, 2 * MiB]))
leaves = st.one_of(numbers, st.text(max_size=8), st.none(), st.booleans(),
                   st.sampled_from(["segments", "blocks", "active_allocated", "inactive", "alloc", "size"]))
KEYS = st.sampled_from(["segments", "blocks", "device_traces", "size", "total_size", "state", "device", "action",
                        "addr", "requested_size", "frames", "allocator_settings", "version"])
plain = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(KEYS, inner, max_size=5)), max_leaves=25)


@st.composite
def snapshot_pickles(draw) -> bytes:
    obj = draw(st.one_of(plain, st.builds(lambda s, b: {"segments": [{"device": 0, "total_size": s, "blocks": b}]},
                                          numbers, st.lists(plain, max_size=3))))
    data = bytearray(pickle.dumps(obj, protocol=draw(st.integers(2, 5))))
    how = draw(st.sampled_from(["whole", "truncate", "flip"]))
    if how == "truncate":
        data = data[:draw(st.integers(0, len(data)))]
    elif how == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    return bytes(data)


def _report_or_error(data: bytes) -> None:
    try:
        r = load_report(data)
    except VramlensError as e:
        assert "\n" not in str(e)
        return
    assert r.reserved_bytes >= 0 and r.allocated_bytes >= 0
    json.dumps(r.to_dict(), allow_nan=False)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot_pickles())
def test_fuzzed_pickles_give_a_report_or_a_vramlens_error(data):
    _report_or_error(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(list(STATS) + ["active_bytes.all.current", "inactive_split_bytes.all.current",
                                                      "segment.all.current", "num_ooms", "num_alloc_retries"]),
                       st.one_of(numbers, st.text(max_size=4), st.none(), st.booleans(), st.lists(st.integers()))))
def test_fuzzed_memory_stats_give_a_report_or_a_vramlens_error(stats):
    text = json.dumps(stats)  # NaN and Infinity as JSON's extension writes them
    _report_or_error(text.encode())
