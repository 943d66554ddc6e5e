"""Read a memory snapshot safely and say where the memory went.

Two inputs give the same :class:`SnapshotReport`:

- a pickle written by ``torch.cuda.memory._dump_snapshot()``: a dict with ``segments`` (each
  with its ``blocks``), ``device_traces`` (one list of trace entries per device, present when
  ``_record_memory_history`` was on) and ``allocator_settings``;
- ``torch.cuda.memory_stats()`` dumped as JSON (keys such as ``"allocated_bytes.all.peak"``).

Pickles are read with :class:`RestrictedUnpickler`, whose ``find_class`` refuses every global.
A snapshot holds only dicts, lists, tuples, str, int, float, bool and None (PyTorch writes it
with plain ``pickle.dump`` of the dict ``torch._C._cuda_memorySnapshot`` returns), and without
a global a pickle cannot name anything to call: GLOBAL, STACK_GLOBAL, INST, OBJ and the
extension-registry opcodes all go through ``find_class``, and REDUCE/NEWOBJ/BUILD need an object
only those can produce. ``persistent_load`` is refused as well. Nothing in the file runs.
"""

from __future__ import annotations

import io
import math
import pickle
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

from vramlens.allocator.config import AllocatorConfig
from vramlens.allocator.simulator import round_size
from vramlens.errors import SnapshotError
from vramlens.limits import (
    MAX_DEVICE_BYTES,
    MAX_DEVICE_INDEX,
    MAX_JSON_DEPTH,
    MAX_PICKLE_DEPTH,
    MAX_SNAPSHOT_BYTES,
    show,
)

#: Block states a snapshot uses.
BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")
#: Trace actions PyTorch records (c10 TraceEntry::Action); "user_defined" are annotations.
TRACE_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                 "segment_map", "segment_unmap", "snapshot", "oom", "user_defined")
#: Snapshot format versions understood: PyTorch's snapshots carry no version key so far.
SUPPORTED_VERSIONS = (None,)
_TOP_KEYS = ("segments", "device_traces", "allocator_settings", "external_annotations")
#: Frames from inside PyTorch are skipped when naming where an allocation came from.
_INTERNAL = ("/torch/", "\\torch\\", "<frozen", "<string>")


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only: every global is refused."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise SnapshotError(
            f"refusing to load {module}.{name}: a memory snapshot holds only plain data, "
            "so this file is not one (or it is hostile); nothing was executed")

    def persistent_load(self, pid: object) -> NoReturn:
        raise SnapshotError("refusing a persistent id: a memory snapshot holds only plain data; nothing was executed")


def safe_loads(data: bytes) -> object:
    """Unpickle ``data`` with :class:`RestrictedUnpickler`; refuse more than MAX_PICKLE_DEPTH nesting.

    Raises:
        SnapshotError: the data is over MAX_SNAPSHOT_BYTES, names a global, is truncated, is not a
            pickle, or nests containers deeper than MAX_PICKLE_DEPTH (or in a cycle).
    """
    _check_size(len(data))
    try:
        obj = RestrictedUnpickler(io.BytesIO(data)).load()
    except SnapshotError:
        raise
    except (EOFError, pickle.UnpicklingError, ValueError, IndexError, KeyError, TypeError, MemoryError,
            RecursionError, AttributeError, UnicodeDecodeError, OverflowError) as e:
        detail = _one_line(str(e)) or type(e).__name__
        raise SnapshotError(f"not a readable pickle (truncated or corrupt: {detail})") from None
    check_nesting(obj, MAX_PICKLE_DEPTH, "pickle")
    return obj


def _one_line(text: str, width: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width] + "..."


def _check_size(n: int) -> None:
    if n > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(f"the file is over the {MAX_SNAPSHOT_BYTES:,}-byte limit for a snapshot (MAX_SNAPSHOT_BYTES): "
                            "record fewer entries (_record_memory_history(max_entries=...))")


_CONTAINERS = (dict, list, tuple, set, frozenset)
_Container = dict[Any, Any] | list[Any] | tuple[Any, ...] | set[Any] | frozenset[Any]


@dataclass(slots=True)
class _Visit:
    """One container on check_nesting's stack."""

    container: _Container
    children: Iterator[object]
    height: int  # its height so far


def check_nesting(obj: object, limit: int, what: str) -> None:
    """Refuse containers nested deeper than ``limit``, or in a cycle, without recursing.

    The longest path is found by an explicit-stack depth-first walk that remembers each
    container's height, so shared sub-structures (pickle's memo) are walked once: linear time.

    Raises:
        SnapshotError: nesting over ``limit``, or a container that contains itself.
    """
    if not isinstance(obj, _CONTAINERS):
        return
    height: dict[int, int] = {}       # id -> levels of containers below and including it
    on_path: set[int] = set()
    keep = [obj]                      # ids stay valid: every object walked stays referenced by obj
    stack = [_Visit(obj, _children(obj), 1)]
    on_path.add(id(obj))

    def deep() -> SnapshotError:
        return SnapshotError(f"the {what} nests containers more than {limit} deep (MAX_{what.upper()}_DEPTH): "
                             "a memory snapshot is a few levels deep; this file is corrupt or hostile")

    while stack:
        top = stack[-1]
        for child in top.children:
            if not isinstance(child, _CONTAINERS):
                continue
            cid = id(child)
            if cid in on_path:
                raise SnapshotError(f"the {what} holds a container inside itself: a memory snapshot has no cycles; "
                                    "this file is corrupt or hostile")
            if cid in height:
                if len(stack) + height[cid] > limit:
                    raise deep()
                top.height = max(top.height, 1 + height[cid])
                continue
            if len(stack) + 1 > limit:
                raise deep()
            on_path.add(cid)
            stack.append(_Visit(child, _children(child), 1))
            break
        else:
            stack.pop()
            on_path.discard(id(top.container))
            height[id(top.container)] = top.height
            if stack:
                stack[-1].height = max(stack[-1].height, 1 + top.height)
    del keep


def _children(obj: _Container) -> Iterator[object]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield v
    else:
        yield from obj


@dataclass(frozen=True, slots=True)
class FrameTotal:
    """Live bytes attributed to one source line."""

    frame: str
    bytes: int
    count: int


@dataclass(frozen=True, slots=True)
class History:
    """What device_traces say over the recorded window.

    Attributes:
        n_entries: trace entries.
        actions: count per action.
        peak_allocated_bytes: the largest sum of live block sizes (requests rounded by
            round_size; an unsplit large block counts as its rounded request).
        peak_requested_bytes: the largest sum of live requested sizes.
        peak_reserved_bytes: the largest reservation, from segment_alloc/free/map/unmap.
        baseline_allocated_bytes / baseline_reserved_bytes: state before the first entry,
            inferred from the snapshot's final state (0 when the whole run was recorded).
        complete: whether the window starts from an empty allocator.
        ooms: oom entries (each: requested size and CUDA's free bytes then).
        timeline: (entry index, allocated, reserved) after entries that change them, compressed.
        top_frames_at_peak: live bytes by source line at the allocated peak.
    """

    n_entries: int
    actions: dict[str, int]
    peak_allocated_bytes: int
    peak_requested_bytes: int
    peak_reserved_bytes: int
    baseline_allocated_bytes: int
    baseline_reserved_bytes: int
    complete: bool
    ooms: tuple[tuple[int, int], ...]
    timeline: tuple[tuple[int, int, int], ...]
    top_frames_at_peak: tuple[FrameTotal, ...]


@dataclass(frozen=True, slots=True)
class SnapshotReport:
    """Memory of one device as a snapshot or memory_stats shows it, bytes.

    Attributes:
        source: "snapshot" or "memory_stats".
        reserved_bytes / allocated_bytes / active_bytes / requested_bytes: current totals.
        fragmentation_bytes: reserved minus allocated.
        largest_free_block_bytes: the largest inactive block (None from memory_stats).
        segments: segment count.
        blocks_by_state: state -> (count, bytes).
        releasable_bytes: wholly free segments (what empty_cache would return).
        inactive_split_bytes: free blocks inside segments still in use (fragmentation proper).
        pending_free_bytes: freed blocks still used by another stream.
        peak_allocated_bytes / peak_reserved_bytes: peaks, from history or memory_stats.
        num_alloc_retries / num_ooms: from memory_stats (None from a snapshot).
        top_frames: live bytes by source line, largest first.
        history: the recorded allocation history, when there is one.
        config: allocator settings recorded in the snapshot.
        explanation: lines explaining reserved minus allocated.
        notes: anything tolerated or assumed while reading.
    """

    source: str
    reserved_bytes: int
    allocated_bytes: int
    active_bytes: int
    requested_bytes: int | None
    fragmentation_bytes: int
    largest_free_block_bytes: int | None
    segments: int
    blocks_by_state: dict[str, tuple[int, ...]]
    releasable_bytes: int | None
    inactive_split_bytes: int | None
    pending_free_bytes: int | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    num_alloc_retries: int | None
    num_ooms: int | None
    top_frames: tuple[FrameTotal, ...]
    history: History | None
    config: AllocatorConfig | None
    explanation: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the keys `vramlens snapshot --json` prints."""
        h = self.history
        return {
            "source": self.source,
            "reserved_bytes": self.reserved_bytes,
            "allocated_bytes": self.allocated_bytes,
            "active_bytes": self.active_bytes,
            "requested_bytes": self.requested_bytes,
            "fragmentation_bytes": self.fragmentation_bytes,
            "largest_free_block_bytes": self.largest_free_block_bytes,
            "segments": self.segments,
            "blocks_by_state": {k: {"count": c, "bytes": b} for k, (c, b) in self.blocks_by_state.items()},
            "releasable_bytes": self.releasable_bytes,
            "inactive_split_bytes": self.inactive_split_bytes,
            "pending_free_bytes": self.pending_free_bytes,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "num_alloc_retries": self.num_alloc_retries,
            "num_ooms": self.num_ooms,
            "top_frames": [{"frame": f.frame, "bytes": f.bytes, "count": f.count} for f in self.top_frames],
            "history": None if h is None else {
                "entries": h.n_entries, "actions": h.actions, "peak_allocated_bytes": h.peak_allocated_bytes,
                "peak_requested_bytes": h.peak_requested_bytes, "peak_reserved_bytes": h.peak_reserved_bytes,
                "baseline_allocated_bytes": h.baseline_allocated_bytes,
                "baseline_reserved_bytes": h.baseline_reserved_bytes, "complete": h.complete,
                "ooms": [{"size": s, "device_free": f} for s, f in h.ooms],
                "top_frames_at_peak": [{"frame": f.frame, "bytes": f.bytes, "count": f.count}
                                       for f in h.top_frames_at_peak],
            },
            "alloc_conf": self.config.text if self.config else None,
            "explanation": list(self.explanation),
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- validation helpers
def _int(d: dict[str, Any], key: str, where: str, default: int | None = None, *, limit: int = MAX_DEVICE_BYTES) -> int:
    """``d[key]`` as a whole number in [0, limit] (byte counts by default), or SnapshotError naming it."""
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise SnapshotError(f"{where}: '{key}' is {show(v)}, not a whole number: not a memory snapshot")
    if v < 0:
        raise SnapshotError(f"{where}: '{key}' is {show(v)}, below 0: a size or address is never negative; "
                            "this file is corrupt")
    if v > limit:
        raise SnapshotError(f"{where}: '{key}' is {show(v)}, over the limit of {limit:,}: no device holds that; "
                            "this file is corrupt")
    return v


def frame_label(frames: object) -> str:
    """The first frame outside PyTorch, as "file:line:function" ("<unknown>" without frames)."""
    if not isinstance(frames, list) or not frames:
        return "<unknown>"
    pick = None
    for f in frames:
        if isinstance(f, dict) and not any(s in str(f.get("filename", "")) for s in _INTERNAL):
            pick = f
            break
    f = pick or (frames[0] if isinstance(frames[0], dict) else {})
    return f"{f.get('filename', '?')}:{f.get('line', '?')}:{f.get('name', '?')}"


def _top(counter_bytes: dict[str, int], counter_n: Counter[str], n: int) -> tuple[FrameTotal, ...]:
    items = sorted(counter_bytes.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return tuple(FrameTotal(k, b, counter_n[k]) for k, b in items)


def config_from_settings(settings: object) -> AllocatorConfig | None:
    """The AllocatorConfig a snapshot's allocator_settings record (None if absent or unreadable)."""
    if not isinstance(settings, dict):
        return None
    text = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    try:
        conf = AllocatorConfig.parse(text if isinstance(text, str) else None)
    except Exception:
        return None
    return conf


# --------------------------------------------------------------------------- snapshot analysis
def analyze_snapshot(snap: object, *, top: int = 10, device: int | None = None) -> SnapshotReport:
    """Report on an unpickled snapshot dict.

    Raises:
        SnapshotError: not a snapshot (wrong types, missing segments, unknown version or states).
    """
    if not isinstance(snap, dict):
        raise SnapshotError(f"the file holds a {type(snap).__name__}, not a snapshot dict with 'segments'")
    version = snap.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise SnapshotError(f"snapshot version {show(version)} is not supported (known: PyTorch's unversioned format)")
    if "segments" not in snap or not isinstance(snap["segments"], list):
        raise SnapshotError("no 'segments' list: not a torch.cuda.memory._dump_snapshot() file")
    notes = [f"ignored unknown key {show(k)}" for k in snap if k not in _TOP_KEYS and k != "version"]
    segs = snap["segments"]
    for si, seg in enumerate(segs):
        if not isinstance(seg, dict) or not isinstance(seg.get("blocks"), list):
            raise SnapshotError(f"segments[{si}] is not a segment dict with 'blocks': not a memory snapshot")
        _int(seg, "device", f"segments[{si}]", 0, limit=MAX_DEVICE_INDEX)
    devices = sorted({s.get("device", 0) for s in segs})
    if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
        raise SnapshotError(f"device={show(device)} must be a device index >= 0")
    if device is None:
        device = devices[0] if devices else 0
    if len(devices) > 1:
        notes.append(f"segments on devices {devices}: reporting device {device}")
    reserved = allocated = active = requested = releasable = split_free = pending = largest = 0
    by_state: dict[str, list[int]] = {s: [0, 0] for s in BLOCK_STATES}
    top_b: dict[str, int] = defaultdict(int)
    top_n: Counter[str] = Counter()
    n_segments = 0
    for si, seg in enumerate(segs):
        where = f"segments[{si}]"
        if not isinstance(seg, dict) or not isinstance(seg.get("blocks"), list):
            raise SnapshotError(f"{where} is not a segment dict with 'blocks': not a memory snapshot")
        if seg.get("device", 0) != device:
            continue
        n_segments += 1
        total = _int(seg, "total_size", where)
        reserved += total
        seg_alloc = seg_active = 0
        free_here = []
        for bi, blk in enumerate(seg["blocks"]):
            bwhere = f"{where}.blocks[{bi}]"
            if not isinstance(blk, dict):
                raise SnapshotError(f"{bwhere} is not a block dict: not a memory snapshot")
            state = blk.get("state")
            if state not in BLOCK_STATES:
                raise SnapshotError(f"{bwhere}: unknown block state {state!r} (known: {', '.join(BLOCK_STATES)})")
            size = _int(blk, "size", bwhere)
            by_state[state][0] += 1
            by_state[state][1] += size
            if state == "active_allocated":
                seg_alloc += size
                seg_active += size
                requested += _int(blk, "requested_size", bwhere, size)
                label = frame_label(blk.get("frames"))
                top_b[label] += size
                top_n[label] += 1
            elif state == "active_pending_free":
                seg_active += size
                pending += size
            else:
                free_here.append(size)
                largest = max(largest, size)
        if seg_active > total:
            raise SnapshotError(f"{where}: its blocks in use hold {seg_active:,} bytes but 'total_size' is {total:,}: "
                                "a segment never hands out more than it holds; this file is corrupt")
        allocated += seg_alloc
        active += seg_active
        if seg_active == 0:
            releasable += total
        else:
            split_free += sum(free_here)
    conf = config_from_settings(snap.get("allocator_settings"))
    history = None
    traces = snap.get("device_traces")
    if traces is not None:
        if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
            raise SnapshotError("'device_traces' is not a list of lists: not a memory snapshot")
        if device < len(traces) and traces[device]:
            history = analyze_history(traces[device], allocated, reserved, conf=conf, top=top, notes=notes)
    explanation = explain_gap(reserved, allocated, releasable, split_free, pending, by_state)
    return SnapshotReport(
        source="snapshot", reserved_bytes=reserved, allocated_bytes=allocated, active_bytes=active,
        requested_bytes=requested, fragmentation_bytes=reserved - allocated, largest_free_block_bytes=largest,
        segments=n_segments, blocks_by_state={k: tuple(v) for k, v in by_state.items()},
        releasable_bytes=releasable, inactive_split_bytes=split_free, pending_free_bytes=pending,
        peak_allocated_bytes=history.peak_allocated_bytes if history else None,
        peak_reserved_bytes=history.peak_reserved_bytes if history else None,
        num_alloc_retries=None, num_ooms=(sum(1 for _ in history.ooms) if history else None),
        top_frames=_top(top_b, top_n, top), history=history, config=conf,
        explanation=explanation, notes=tuple(notes),
    )


def analyze_history(entries: list[Any], final_allocated: int, final_reserved: int, *,
                    conf: AllocatorConfig | None = None, top: int = 10, notes: list[str] | None = None) -> History:
    """Walk one device's trace entries: peaks, baseline, OOMs, timeline, top frames at the peak.

    Linear in the entries: one pass keeps running totals and the index of the allocated peak;
    a second pass, up to that index, rebuilds the blocks live at the peak for its top frames
    (copying the live set at each new peak was quadratic on a growing run).

    Raises:
        SnapshotError: an entry that is not a dict, or a size or address that is not a whole
            number in range.
    """
    conf = conf or AllocatorConfig()
    notes = notes if notes is not None else []
    actions: Counter[str] = Counter()
    live: dict[int, tuple[int, int, int]] = {}  # addr -> (block size, requested, entry index)
    alloc = req = res = 0
    points: list[tuple[int, int, int]] = []
    peak_a = peak_r = peak_q = 0
    peak_at = -1  # the entry after which allocated first reached its peak
    ooms = []
    unknown: Counter[str] = Counter()
    steps: list[tuple[int, str, int, int]] = []  # (entry index, action, addr, size) of alloc/free_completed
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise SnapshotError(f"device_traces entry {i} is not a dict: not a memory snapshot")
        action = e.get("action")
        if action not in TRACE_ACTIONS:
            unknown[_one_line(str(action), 40) if isinstance(action, str) else show(action)] += 1
            continue
        actions[action] += 1
        if action == "oom":
            ooms.append((_int(e, "size", f"trace[{i}]", 0), _int(e, "device_free", f"trace[{i}]", 0)))
            continue
        if action in ("snapshot", "user_defined", "free_requested"):
            continue
        size = _int(e, "size", f"trace[{i}]")
        if action == "alloc":
            addr = _int(e, "addr", f"trace[{i}]", limit=_MAX_ADDR)
            block = round_size(size, conf) if size else 0
            live[addr] = (block, size, i)
            steps.append((i, action, addr, size))
            alloc += block
            req += size
        elif action == "free_completed":
            addr = _int(e, "addr", f"trace[{i}]", limit=_MAX_ADDR)
            block, size_req, _ = live.pop(addr, (round_size(size, conf) if size else 0, size, None))
            steps.append((i, action, addr, size))
            alloc -= block
            req -= size_req
        elif action in ("segment_alloc", "segment_map"):
            res += size
        elif action in ("segment_free", "segment_unmap"):
            res -= size
        if alloc > peak_a:
            peak_a = alloc
            peak_at = i
        peak_q = max(peak_q, req)
        peak_r = max(peak_r, res)
        points.append((i, alloc, res))
    if unknown:
        notes.append("ignored unknown trace actions: " + ", ".join(f"{k} x{v}" for k, v in sorted(unknown.items())))
    # The ring buffer may start mid-run: what was live before its first entry is what the
    # snapshot holds now minus what the trace added.
    base_a = max(0, final_allocated - alloc)
    base_r = max(0, final_reserved - res)
    top_b: dict[str, int] = defaultdict(int)
    top_n: Counter[str] = Counter()
    for block, i in _live_at(steps, peak_at, conf):
        label = frame_label(entries[i].get("frames"))
        top_b[label] += block
        top_n[label] += 1
    step = max(1, len(points) // 2048)
    timeline = tuple((i, a + base_a, r + base_r) for i, a, r in points[::step])
    return History(
        n_entries=len(entries), actions=dict(actions), peak_allocated_bytes=peak_a + base_a,
        peak_requested_bytes=peak_q, peak_reserved_bytes=max(peak_r + base_r, final_reserved),
        baseline_allocated_bytes=base_a, baseline_reserved_bytes=base_r, complete=(base_a == 0 and base_r == 0),
        ooms=tuple(ooms), timeline=timeline, top_frames_at_peak=_top(top_b, top_n, top),
    )


#: Device addresses are 64-bit.
_MAX_ADDR = 2**64 - 1


def _live_at(steps: list[tuple[int, str, int, int]], last: int, conf: AllocatorConfig) -> list[tuple[int, int]]:
    """(block size, entry index) of each block live just after entry ``last``, replaying allocs and frees."""
    live: dict[int, tuple[int, int]] = {}
    for i, action, addr, size in steps:
        if i > last:
            break
        if action == "alloc":
            live[addr] = (round_size(size, conf) if size else 0, i)
        else:
            live.pop(addr, None)
    return list(live.values())


def explain_gap(reserved: int, allocated: int, releasable: int | None, split_free: int | None,
                pending: int | None, by_state: dict[str, list[int]]) -> tuple[str, ...]:
    """Lines that account for reserved minus allocated."""
    from vramlens.units import human_bytes as hb

    gap = reserved - allocated
    lines = [f"reserved {hb(reserved)} - allocated {hb(allocated)} = {hb(gap)} cached by the allocator, not in use"]
    if releasable is not None:
        lines.append(f"{hb(releasable)} in wholly free segments: torch.cuda.empty_cache() would return them to CUDA")
    if split_free is not None:
        lines.append(f"{hb(split_free)} free inside segments still in use (inactive split blocks): fragmentation; "
                     "they serve later requests that fit but cannot be returned")
        if reserved and split_free > 0.1 * reserved:
            lines.append("fragmentation exceeds 10% of reserved: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                         "lets free pieces grow into one another")
    if pending:
        lines.append(f"{hb(pending)} freed but still in use by another stream (active_pending_free)")
    return tuple(lines)


# --------------------------------------------------------------------------- memory_stats
_STATS_REQUIRED = ("allocated_bytes.all.current", "reserved_bytes.all.current")


def analyze_memory_stats(stats: object) -> SnapshotReport:
    """Report on a ``torch.cuda.memory_stats()`` dict.

    Raises:
        SnapshotError: the dict lacks allocated_bytes.all.current / reserved_bytes.all.current, a
            value is not a whole number in [0, MAX_DEVICE_BYTES], or the values contradict one
            another (allocated over reserved, a peak under its current value).
    """
    if not isinstance(stats, dict) or any(k not in stats for k in _STATS_REQUIRED):
        raise SnapshotError("not torch.cuda.memory_stats() JSON: 'allocated_bytes.all.current' and "
                            "'reserved_bytes.all.current' are required")

    def get(key: str) -> int | None:
        v = stats.get(key)
        if v is None:
            return None
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)  # JSON writers may emit 1024.0
        if isinstance(v, bool) or not isinstance(v, int):
            raise SnapshotError(f"memory_stats key {key!r} is {show(v)}, not a whole number")
        if not 0 <= v <= MAX_DEVICE_BYTES:
            raise SnapshotError(f"memory_stats key {key!r} is {show(v)}, outside 0..{MAX_DEVICE_BYTES:,} "
                                "(MAX_DEVICE_BYTES): this file is corrupt")
        return v

    reserved, allocated = get("reserved_bytes.all.current"), get("allocated_bytes.all.current")
    if reserved is None or allocated is None:
        raise SnapshotError("memory_stats 'allocated_bytes.all.current' and 'reserved_bytes.all.current' are null: "
                            "both must be whole numbers of bytes")
    active = get("active_bytes.all.current")
    split = get("inactive_split_bytes.all.current")
    segments = get("segment.all.current") or 0
    problems = []
    if allocated > reserved:
        problems.append(f"allocated_bytes.all.current={allocated:,} exceeds reserved_bytes.all.current={reserved:,}")
    if split is not None and allocated <= reserved and split > reserved - allocated:
        problems.append(f"inactive_split_bytes.all.current={split:,} exceeds reserved minus allocated "
                        f"({reserved - allocated:,})")
    for key, now in (("allocated_bytes", allocated), ("reserved_bytes", reserved)):
        peak = get(f"{key}.all.peak")
        if peak is not None and peak < now:
            problems.append(f"{key}.all.peak={peak:,} is below {key}.all.current={now:,}")
    if problems:
        raise SnapshotError("memory_stats values contradict the allocator: " + "; ".join(problems)
                            + ": this is not one device's torch.cuda.memory_stats()")
    explanation = explain_gap(reserved, allocated, None, split, None, {})
    if split is not None:
        explanation += (f"the other {reserved - allocated - split:,} B are wholly free cached segments",)
    return SnapshotReport(
        source="memory_stats", reserved_bytes=reserved, allocated_bytes=allocated,
        active_bytes=active if active is not None else allocated, requested_bytes=get("requested_bytes.all.current"),
        fragmentation_bytes=reserved - allocated, largest_free_block_bytes=None, segments=segments,
        blocks_by_state={}, releasable_bytes=None, inactive_split_bytes=split, pending_free_bytes=None,
        peak_allocated_bytes=get("allocated_bytes.all.peak"), peak_reserved_bytes=get("reserved_bytes.all.peak"),
        num_alloc_retries=get("num_alloc_retries"), num_ooms=get("num_ooms"), top_frames=(), history=None,
        config=None, explanation=explanation,
        notes=("memory_stats has no block list: largest free block and stack frames are unknown",),
    )


def load_report(data: bytes, *, top: int = 10) -> SnapshotReport:
    """A report from the bytes of a snapshot pickle or a memory_stats JSON file.

    Raises:
        SnapshotError: neither, a pickle that is hostile, truncated or not a snapshot, or a file
            over a bound in vramlens.limits (size, nesting, digits, sizes in bytes).
    """
    _check_size(len(data))
    head = data.lstrip()[:1]
    if head == b"{":
        obj = _json_loads(data)
        if isinstance(obj, dict) and "segments" in obj:
            return analyze_snapshot(obj, top=top)
        return analyze_memory_stats(obj)
    if not data:
        raise SnapshotError("the file is empty")
    return analyze_snapshot(safe_loads(data), top=top)


def _json_loads(data: bytes) -> object:
    """JSON with every number bounded (safe_io.loads_bounded): at most MAX_INT_DIGITS digits, no NaN
    or Infinity, nesting at most MAX_JSON_DEPTH."""
    from vramlens.safe_io import UnsafeJSON, loads_bounded

    try:
        return loads_bounded(data)
    except UnsafeJSON as e:
        if e.kind == "depth":
            raise SnapshotError(f"the JSON nests more than {MAX_JSON_DEPTH} deep (MAX_JSON_DEPTH): memory_stats is "
                                "flat; this file is corrupt or hostile") from None
        if e.kind == "number":
            raise SnapshotError(f"{e}: no byte count is like that; this file is corrupt") from None
        raise SnapshotError(f"looks like JSON but does not parse: {_one_line(e.detail)}") from None
