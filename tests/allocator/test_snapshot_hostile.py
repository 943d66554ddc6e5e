"""Bad and hostile snapshots and memory_stats: one SnapshotError naming the field, never a traceback.

Also: analyze_history is linear and gives what the old quadratic walk gave (kept here as the
reference), and Hypothesis-built pickles and memory_stats give a report or a vramlens error.
"""

from __future__ import annotations

import json
import os
import pickle
import random
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vramlens.allocator.snapshot as S
from vramlens.allocator.config import AllocatorConfig
from vramlens.allocator.simulator import round_size
from vramlens.allocator.snapshot import analyze_history, frame_label, load_report
from vramlens.cli.main import main
from vramlens.errors import SnapshotError, VramlensError

MiB = 1 << 20


def snapshot(size=2 * MiB, total=20 * MiB, device=0):
    blocks = [{"address": 0, "size": size, "requested_size": size, "state": "active_allocated", "frames": []},
              {"address": size, "size": total - 2 * MiB, "requested_size": 0, "state": "inactive", "frames": []}]
    return {"segments": [{"device": device, "address": 0, "total_size": total, "blocks": blocks}]}


def refused(data: bytes) -> str:
    with pytest.raises(SnapshotError) as e:
        load_report(data)
    return str(e.value)


@pytest.mark.parametrize("snap, message", [
    (snapshot(size=10**400), "segments[0].blocks[0]: 'size' is a 401-digit number, over the limit of "
                             "1,125,899,906,842,624: no device holds that; this file is corrupt"),
    (snapshot(size=-5), "segments[0].blocks[0]: 'size' is -5, below 0: a size or address is never negative; "
                        "this file is corrupt"),
    (snapshot(size=float("nan")), "segments[0].blocks[0]: 'size' is nan, not a whole number: not a memory snapshot"),
    (snapshot(device="cuda:0"), "segments[0]: 'device' is 'cuda:0', not a whole number: not a memory snapshot"),
    (snapshot(size=30 * MiB), "segments[0]: its blocks in use hold 31,457,280 bytes but 'total_size' is 20,971,520: "
                              "a segment never hands out more than it holds; this file is corrupt"),
])
def test_bad_fields_are_named(snap, message):
    assert refused(pickle.dumps(snap)) == message


def test_nesting_100000_deep_is_refused_without_recursing():
    n = 100_000
    data = b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b"."
    assert refused(data) == ("the pickle nests containers more than 64 deep (MAX_PICKLE_DEPTH): a memory snapshot is "
                             "a few levels deep; this file is corrupt or hostile")
    assert refused(b"[" * n + b"]" * n) == "not a readable pickle (truncated or corrupt: invalid load key, '['.)"
    assert refused(b'{"a": ' + b"[" * n + b"]" * n + b"}") == (
        "the JSON nests more than 64 deep (MAX_JSON_DEPTH): memory_stats is flat; this file is corrupt or hostile")
    # one past the limit: the same line (safe_io's scan refuses it before parsing, at any depth)
    assert refused(b'{"a": ' + b"[" * 64 + b"]" * 64 + b"}") == (
        "the JSON nests more than 64 deep (MAX_JSON_DEPTH): memory_stats is flat; this file is corrupt or hostile")


def test_shared_and_cyclic_structures():
    # a DAG 64 lists deep whose every level is shared twice: 2**64 paths, walked in linear time
    x: object = 0
    for _ in range(64):
        x = [x, x]
    S.check_nesting(x, 64, "pickle")
    with pytest.raises(SnapshotError, match="more than 64 deep"):
        S.check_nesting([x], 64, "pickle")
    # a shallow path found first must not hide a deeper path through the same container
    deep: object = 0
    for _ in range(70):
        deep = [deep]
    with pytest.raises(SnapshotError, match="more than 64 deep"):
        S.check_nesting([deep, [[[[deep]]]]], 64, "pickle")
    with pytest.raises(SnapshotError, match="more than 64 deep"):
        S.check_nesting([[[[[deep]]]], deep], 64, "pickle")
    assert refused(b"\x80\x02]q\x00h\x00a.") == (
        "the pickle holds a container inside itself: a memory snapshot has no cycles; this file is corrupt or hostile")


def test_size_cap(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(S, "MAX_SNAPSHOT_BYTES", 100)
    assert refused(b"x" * 101) == ("the file is over the 100-byte limit for a snapshot (MAX_SNAPSHOT_BYTES): record "
                                   "fewer entries (_record_memory_history(max_entries=...))")
    import vramlens.cli.snapshot as C

    monkeypatch.setattr(C, "MAX_SNAPSHOT_BYTES", 100)
    big = tmp_path / "big.pickle"
    big.write_bytes(b"x" * 5000)
    assert main(["snapshot", str(big)]) == 2
    assert capsys.readouterr().err == (f"error: {big} is over the 100-byte limit for a snapshot (MAX_SNAPSHOT_BYTES): "
                                       "record fewer entries (_record_memory_history(max_entries=...))\n")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_a_fifo_does_not_hang(tmp_path, capsys):
    fifo = tmp_path / "dump.pickle"
    os.mkfifo(fifo)
    assert main(["snapshot", str(fifo)]) == 2
    assert capsys.readouterr() == ("", f"error: cannot read {fifo}: a FIFO, socket or device, not a regular file\n")


STATS = {"allocated_bytes.all.current": 3 * MiB, "allocated_bytes.all.peak": 38 * MiB,
         "reserved_bytes.all.current": 22 * MiB, "reserved_bytes.all.peak": 52 * MiB}


@pytest.mark.parametrize("text, message", [
    ('{"allocated_bytes.all.current": 1%s, "reserved_bytes.all.current": 2}' % ("0" * 400),
     "an integer of 401 digits is over the limit of 30 digits: no byte count is like that; this file is corrupt"),
    ('{"allocated_bytes.all.current": NaN, "reserved_bytes.all.current": 2}',
     "NaN is not JSON (no NaN or Infinity): no byte count is like that; this file is corrupt"),
    ('{"allocated_bytes.all.current": 1e400, "reserved_bytes.all.current": 2}',
     "the number 1e400 is too large for a float (it reads as infinity): no byte count is like that; this file is corrupt"),
    ('{"allocated_bytes.all.current": -1, "reserved_bytes.all.current": 2}',
     "memory_stats key 'allocated_bytes.all.current' is -1, outside 0..1,125,899,906,842,624 (MAX_DEVICE_BYTES): "
     "this file is corrupt"),
    ('{"allocated_bytes.all.current": "3", "reserved_bytes.all.current": 2}',
     "memory_stats key 'allocated_bytes.all.current' is '3', not a whole number"),
    (json.dumps(dict(STATS, **{"allocated_bytes.all.current": 30 * MiB})),
     "memory_stats values contradict the allocator: allocated_bytes.all.current=31,457,280 exceeds "
     "reserved_bytes.all.current=23,068,672: this is not one device's torch.cuda.memory_stats()"),
])
def test_bad_memory_stats(text, message):
    assert refused(text.encode()) == message


def test_whole_float_memory_stats_still_read():
    r = load_report(json.dumps({k: float(v) for k, v in STATS.items()}).encode())
    assert (r.allocated_bytes, r.peak_reserved_bytes) == (3 * MiB, 52 * MiB)


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


def test_history_of_200000_entries_finishes():
    rng = random.Random(1)
    entries, live = [], []
    for i in range(200_000):
        if live and i % 3 == 2:
            addr, size = live.pop(0)
            entries.append({"action": "free_completed", "addr": addr, "size": size})
        else:
            size = rng.choice((512, 1 << 20, 3 << 20))
            entries.append({"action": "alloc", "addr": i << 25, "size": size, "frames": []})
            live.append((i << 25, size))
    h = analyze_history(entries, 0, 0)
    # two allocs per free: the last entry leaves the most blocks live, so the peak is at the end
    assert h.peak_allocated_bytes == sum(round_size(s, AllocatorConfig()) for _, s in live)
    assert h.n_entries == 200_000


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
