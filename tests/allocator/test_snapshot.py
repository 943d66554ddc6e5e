"""Hand-built snapshots in the format torch.cuda.memory._dump_snapshot() writes."""

import json
import os
import pickle

import pytest

import vramlens.cli.main as cli_main
from vramlens.allocator.replay import replay_snapshot, trace_to_events
from vramlens.allocator.snapshot import load_report, safe_loads
from vramlens.errors import SnapshotError

MiB = 1024 * 1024
A0, B0 = 0x7F00_0000_0000, 0x7F00_4000_0000  # two segment addresses
TRAIN = [{"filename": "/venv/lib/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
         {"filename": "train.py", "line": 42, "name": "step"}]
LOSS = [{"filename": "train.py", "line": 50, "name": "loss"}]


def block(addr, size, state, requested=None, frames=()):
    return {"address": addr, "size": size, "requested_size": size if requested is None else requested,
            "state": state, "frames": list(frames)}


def segment(addr, blocks, stream=0, kind="large"):
    total = sum(b["size"] for b in blocks)
    alloc = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    active = alloc + sum(b["size"] for b in blocks if b["state"] == "active_pending_free")
    return {"device": 0, "address": addr, "total_size": total, "stream": stream, "segment_type": kind,
            "segment_pool_id": (0, 0), "allocated_size": alloc, "active_size": active,
            "requested_size": alloc, "is_expandable": False, "frames": [], "blocks": blocks}


def trace(action, addr, size, frames=()):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 0, "frames": list(frames)}


def make_snapshot():
    """The state after this history (each step follows the allocator's rules):

    1. alloc 5 MiB: no cached block -> segment_alloc 20 MiB at A0 (1-10 MiB requests share 20 MiB)
    2. alloc 3 MiB: the 15 MiB remainder at A0+5 MiB is split
    3. free the 5 MiB block (free_requested, free_completed): A0 holds [5 free][3 live][12 free]
    4. alloc 30 MiB: nothing cached fits -> segment_alloc 30 MiB at B0
    5. free it, then empty_cache: segment_free of B0 (no malloc follows: an empty_cache)
    6. alloc 1000 B: small pool, a 2 MiB segment at C0, block of 1024 B
    End: reserved 22 MiB, allocated 3 MiB + 1024 B. Peak reserved 20 + 30 = 50 MiB (the small
    segment comes after the 30 MiB one is gone); peak allocated 3 + 30 = 33 MiB at step 4.
    """
    C0 = 0x7F00_8000_0000
    segments = [
        segment(A0, [block(A0, 5 * MiB, "inactive", 0), block(A0 + 5 * MiB, 3 * MiB, "active_allocated", frames=TRAIN),
                     block(A0 + 8 * MiB, 12 * MiB, "inactive", 0)]),
        segment(C0, [block(C0, 1024, "active_allocated", 1000, LOSS), block(C0 + 1024, 2 * MiB - 1024, "inactive", 0)],
                kind="small"),
    ]
    history = [
        trace("segment_alloc", A0, 20 * MiB), trace("alloc", A0, 5 * MiB, TRAIN),
        trace("alloc", A0 + 5 * MiB, 3 * MiB, TRAIN),
        trace("free_requested", A0, 5 * MiB), trace("free_completed", A0, 5 * MiB),
        trace("segment_alloc", B0, 30 * MiB), trace("alloc", B0, 30 * MiB, LOSS),
        trace("free_requested", B0, 30 * MiB), trace("free_completed", B0, 30 * MiB),
        trace("segment_free", B0, 30 * MiB),
        trace("segment_alloc", C0, 2 * MiB), trace("alloc", C0, 1000, LOSS),
    ]
    return {"segments": segments, "device_traces": [history],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1,
                                   "expandable_segments": False, "roundup_power2_divisions": {"1": 0}}}


def test_report_from_a_snapshot():
    r = load_report(pickle.dumps(make_snapshot()))
    assert (r.reserved_bytes, r.allocated_bytes, r.segments) == (22 * MiB, 3 * MiB + 1024, 2)
    assert r.fragmentation_bytes == 22 * MiB - 3 * MiB - 1024
    assert r.largest_free_block_bytes == 12 * MiB
    assert r.blocks_by_state == {"active_allocated": (2, 3 * MiB + 1024), "active_pending_free": (0, 0),
                                 "inactive": (3, 17 * MiB + 2 * MiB - 1024)}
    assert r.releasable_bytes == 0  # every segment still holds a live block
    assert r.inactive_split_bytes == r.fragmentation_bytes
    assert r.requested_bytes == 3 * MiB + 1000
    # history: peaks over the trace; the trace starts from an empty allocator
    assert (r.peak_allocated_bytes, r.peak_reserved_bytes) == (33 * MiB, 50 * MiB)
    assert r.history.complete and r.history.actions["alloc"] == 4
    assert r.history.top_frames_at_peak[0].frame == "train.py:50:loss"  # the 30 MiB block
    # live blocks by source line: the first frame outside torch
    assert [(f.frame, f.bytes) for f in r.top_frames] == [("train.py:42:step", 3 * MiB), ("train.py:50:loss", 1024)]
    assert any("inactive split" in line for line in r.explanation)


def test_truncated_history_infers_its_baseline():
    snap = make_snapshot()
    snap["device_traces"][0] = snap["device_traces"][0][5:]  # the ring buffer lost the first 5 entries
    r = load_report(pickle.dumps(snap))
    # the 3 MiB block and its 20 MiB segment predate the window
    assert not r.history.complete
    assert (r.history.baseline_allocated_bytes, r.history.baseline_reserved_bytes) == (3 * MiB, 20 * MiB)
    assert r.peak_reserved_bytes == 50 * MiB


def test_replay_matches_the_recorded_segments():
    snap = make_snapshot()
    events = trace_to_events(snap["device_traces"][0])
    assert [e.action for e in events] == ["alloc", "alloc", "free", "alloc", "free", "empty_cache", "alloc"]
    cmp = replay_snapshot(snap)
    assert cmp.complete
    assert cmp.simulated_segments == cmp.recorded_segments == {20 * MiB: 1, 2 * MiB: 1}
    assert (cmp.simulated_peak_reserved_bytes, cmp.recorded_peak_reserved_bytes) == (50 * MiB, 50 * MiB)
    assert cmp.peak_reserved_error == 0.0


def test_memory_stats_json():
    stats = {"allocated_bytes.all.current": 3 * MiB, "allocated_bytes.all.peak": 38 * MiB,
             "reserved_bytes.all.current": 22 * MiB, "reserved_bytes.all.peak": 52 * MiB,
             "active_bytes.all.current": 3 * MiB, "inactive_split_bytes.all.current": 17 * MiB,
             "segment.all.current": 2, "num_alloc_retries": 1, "num_ooms": 0}
    r = load_report(json.dumps(stats).encode())
    assert (r.source, r.reserved_bytes, r.allocated_bytes, r.fragmentation_bytes) == ("memory_stats", 22 * MiB, 3 * MiB, 19 * MiB)
    assert (r.peak_allocated_bytes, r.peak_reserved_bytes, r.num_alloc_retries, r.segments) == (38 * MiB, 52 * MiB, 1, 2)
    assert r.largest_free_block_bytes is None
    with pytest.raises(SnapshotError) as e:
        load_report(b'{"foo": 1}')
    assert str(e.value) == ("not torch.cuda.memory_stats() JSON: 'allocated_bytes.all.current' and "
                            "'reserved_bytes.all.current' are required")


class Hostile:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_hostile_pickles_do_not_run(tmp_path):
    marker = tmp_path / "pwned"
    payloads = [pickle.dumps(Hostile(marker), protocol=p) for p in (0, 2, 4, 5)]
    payloads.append(pickle.dumps({"segments": [Hostile(marker)]}))
    # hand-written GLOBAL + REDUCE calling builtins.eval
    payloads.append(b"cbuiltins\neval\n(V__import__('os').system('touch " + str(marker).encode() + b"')\ntR.")
    payloads.append(b"\x80\x02(X\x03\x00\x00\x00abcq\x00h\x00Q.")  # BINPERSID
    for data in payloads:
        with pytest.raises(SnapshotError) as e:
            load_report(data)
        assert "nothing was executed" in str(e.value)
    assert not marker.exists()


@pytest.mark.parametrize(
    "data, message",
    [
        (pickle.dumps(make_snapshot())[:40], "not a readable pickle (truncated or corrupt: pickle data was truncated)"),
        (pickle.dumps([1, 2, 3]), "the file holds a list, not a snapshot dict with 'segments'"),
        (pickle.dumps({"traces": []}), "no 'segments' list: not a torch.cuda.memory._dump_snapshot() file"),
        (pickle.dumps({"segments": [], "version": 7}),
         "snapshot version 7 is not supported (known: PyTorch's unversioned format)"),
        (pickle.dumps({"segments": [segment(0, [block(0, 512, "zombie")])]}),
         "segments[0].blocks[0]: unknown block state 'zombie' (known: active_allocated, active_pending_free, inactive)"),
        (pickle.dumps({"segments": [{"blocks": [], "total_size": "big"}]}),
         "segments[0]: 'total_size' is 'big', not a whole number: not a memory snapshot"),
        (b"", "the file is empty"),
        (b"hello", "not a readable pickle (truncated or corrupt: Memo value not found at index 101)"),
    ],
)
def test_bad_files(data, message):
    with pytest.raises(SnapshotError) as e:
        load_report(data)
    assert str(e.value) == message


def test_real_snapshots_use_no_globals():
    # What _dump_snapshot writes: pickle.dump of plain containers (the pool id is a tuple).
    data = pickle.dumps(make_snapshot())
    assert safe_loads(data) == make_snapshot()


@pytest.fixture
def cli(monkeypatch):
    monkeypatch.setattr(cli_main, "COMMANDS", ("gpus", "snapshot"))
    return cli_main.main


def test_cli_json(cli, tmp_path, capsys):
    path = tmp_path / "dump.pickle"
    path.write_bytes(pickle.dumps(make_snapshot()))
    html = tmp_path / "report.html"
    assert cli(["snapshot", str(path), "--json", "--top", "1", "--html", str(html)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in ("reserved_bytes", "allocated_bytes", "active_bytes", "fragmentation_bytes",
                                "largest_free_block_bytes", "segments", "peak_allocated_bytes")} == {
        "reserved_bytes": 22 * MiB, "allocated_bytes": 3 * MiB + 1024, "active_bytes": 3 * MiB + 1024,
        "fragmentation_bytes": 19 * MiB - 1024, "largest_free_block_bytes": 12 * MiB, "segments": 2,
        "peak_allocated_bytes": 33 * MiB}
    assert len(out["top_frames"]) == 1
    page = html.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page and "<script" not in page


def test_cli_text_and_errors(cli, tmp_path, capsys):
    path = tmp_path / "dump.pickle"
    path.write_bytes(pickle.dumps(make_snapshot()))
    assert cli(["snapshot", str(path)]) == 0
    out = capsys.readouterr().out
    assert "reserved          22.00 MiB" in out and "train.py:42:step" in out
    bad = tmp_path / "evil.pickle"
    bad.write_bytes(pickle.dumps(Hostile(tmp_path / "pwned")))
    assert cli(["snapshot", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: refusing to load ")
    assert cli(["snapshot", str(tmp_path / "missing.pickle")]) == 2
    assert not (tmp_path / "pwned").exists()
