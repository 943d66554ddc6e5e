"""Bad and hostile snapshots and memory_stats: one SnapshotError naming the field, never a traceback.

Also: analyze_history finishes a long history (tests/allocator/test_snapshot_properties.py compares it
with the old quadratic walk and fuzzes pickles and memory_stats with Hypothesis).
"""

from __future__ import annotations

import json
import os
import pickle
import random

import pytest

import vramlens.allocator.snapshot as S
from vramlens.allocator.config import AllocatorConfig
from vramlens.allocator.simulator import round_size
from vramlens.allocator.snapshot import analyze_history, load_report
from vramlens.cli.main import main
from vramlens.errors import SnapshotError

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
