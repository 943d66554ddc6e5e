"""The event stream a trace yields, and what is computed from it (pure Python, no torch).

A trace is a sequence of storage allocations and frees. Each storage carries a tag (what it
is: a parameter, a gradient, an activation saved for backward, ...), the module and op that
created it, and the phase and step it was created in. From the stream this module computes
the peak of the live total, each tag's and each module's own peak, per-phase and per-step
peaks, and the live set at the peak. The allocator simulator and the plots reuse the stream.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass

from vramlens.units import BLOCK, peak_indices, round_up

#: What a storage is. Final tags are resolved at the end of a trace (see Recorder.resolve).
TAGS: tuple[str, ...] = (
    "parameter",       # model parameter (adapters included); frozen base weights too
    "buffer",          # registered buffer (rotary tables, position ids)
    "gradient",        # .grad of a trainable parameter
    "optimizer_state", # Adam moments, momentum buffers, factored second moments
    "master_weight",   # fp32 master copy of half-precision weights (--dtype fp16 --amp fp16)
    "autocast_cache",  # autocast's half-precision copies of fp32 weights (--dtype fp32 --amp P)
    "activation",      # saved for backward, or alive from forward into backward
    "kv_cache",        # keys and values of past tokens
    "input",           # input ids, labels, masks handed to the model
    "comm_buffer",     # FSDP all-gather / reduce-scatter buffers and unsharded parameters
    "temporary",       # anything else: freed within the op, the module or the phase
    "host",            # lives on the host in a CUDA run (optimizer step counters): not counted
)

#: Tags whose bytes are not on the GPU in a real CUDA run (excluded from every total).
HOST_TAGS: frozenset[str] = frozenset({"host"})

#: Which Breakdown component each tag's bytes belong to.
TAG_COMPONENT: dict[str, str] = {
    "parameter": "weights",
    "buffer": "weights",
    "gradient": "gradients",
    "optimizer_state": "optimizer_states",
    "master_weight": "master_weights",
    "autocast_cache": "master_weights",
    "activation": "activations",
    "input": "activations",
    "kv_cache": "kv_cache",
    "comm_buffer": "comm_buffers",
    "temporary": "temporaries",
}

PHASES: tuple[str, ...] = ("setup", "forward", "backward", "optimizer", "prefill", "decode")

#: The CUDA caching allocator rounds every request up to a multiple of 512 bytes (vramlens.units.BLOCK).
CUDA_ROUND = BLOCK


def round_storage(nbytes: int, multiple: int) -> int:
    """Bytes the allocator hands out for a request: 0 stays 0 (no block), else rounded up."""
    if multiple <= 1 or nbytes <= 0:
        return max(0, nbytes)
    return round_up(nbytes, multiple)


@dataclass(frozen=True, slots=True)
class Event:
    """One allocation or free of a storage (views of one storage count once).

    ``seq`` orders events; ``storage`` is a number unique within the trace; ``tag``, ``module``
    and ``op`` describe the storage (as created); ``phase`` and ``step`` say when this event
    happened.
    """

    seq: int
    action: str  # "alloc" or "free"
    storage: int
    nbytes: int
    tag: str
    module: str
    phase: str
    step: int
    op: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class LiveGroup:
    """Storages alive at the peak that share a tag and a module."""

    tag: str
    module: str
    nbytes: int
    count: int


@dataclass(frozen=True, slots=True)
class LiveTensor:
    """One storage alive at the peak."""

    storage: int
    nbytes: int
    tag: str
    module: str
    op: str
    phase: str
    step: int


@dataclass(frozen=True, slots=True)
class Summary:
    """What a trace measured, computed from its events.

    Attributes:
        peak_allocated: largest total of live storages, bytes.
        peak_seq, peak_phase, peak_step: where that peak happened.
        by_tag: each tag's own peak, bytes.
        by_component: each Breakdown component's own peak (tags summed as they live), bytes.
        by_module: each module's own peak of storages it created, bytes, largest first.
        phase_peaks: ((step, phase), peak of the live total within it), in order.
        step_peaks: (step, peak of the live total within it).
        live_at_peak: the live set at the peak, grouped by tag and module, largest first.
        top_tensors: the largest single storages alive at the peak.
        final_live: bytes still alive when the trace ended.
        host_peak: the peak of host-tagged bytes (offloaded activations' copies, step counters).
    """

    peak_allocated: int
    peak_seq: int
    peak_phase: str
    peak_step: int
    by_tag: dict[str, int]
    by_component: dict[str, int]
    by_module: tuple[tuple[str, int], ...]
    phase_peaks: tuple[tuple[int, str, int], ...]
    step_peaks: tuple[tuple[int, int], ...]
    live_at_peak: tuple[LiveGroup, ...]
    top_tensors: tuple[LiveTensor, ...]
    final_live: int
    host_peak: int = 0

    def phase_peak(self, phase: str, step: int | None = None) -> int:
        """Largest live total in ``phase`` (of ``step``, or of any step)."""
        vals = [b for s, p, b in self.phase_peaks if p == phase and (step is None or s == step)]
        return max(vals, default=0)


#: Inference has no backward: its working set (tags activation, temporary, input) is what the
#: Breakdown calls activations ("the prefill working set").
INFERENCE_COMPONENT: dict[str, str] = {**TAG_COMPONENT, "temporary": "activations"}


def summarize(events: list[Event], *, top: int = 20, component_of: dict[str, str] | None = None) -> Summary:
    """One pass over the events: running totals per tag, component, module, phase and step.

    ``component_of`` maps tags to Breakdown components (default TAG_COMPONENT).
    """
    component_of = component_of or TAG_COMPONENT
    total = 0
    peak = 0
    peak_seq = -1
    peak_phase = ""
    peak_step = 0
    tag_now: dict[str, int] = {}
    tag_peak: dict[str, int] = {t: 0 for t in TAGS}
    comp_now: dict[str, int] = {}
    comp_peak: dict[str, int] = {}
    mod_now: dict[str, int] = {}
    mod_peak: dict[str, int] = {}
    phase_peaks: dict[tuple[int, str], int] = {}
    live: set[int] = set()
    host_now = host_peak = 0
    host_live: set[int] = set()
    for e in events:
        if e.tag in HOST_TAGS:
            # host memory (offloaded activations' copies, optimizer step counters): its own peak
            if e.action == "alloc":
                host_live.add(e.storage)
                host_now += e.nbytes
                host_peak = max(host_peak, host_now)
            elif e.storage in host_live:
                host_live.discard(e.storage)
                host_now -= e.nbytes
            continue
        sign = 1 if e.action == "alloc" else -1
        if sign > 0:
            live.add(e.storage)
        elif e.storage in live:
            live.discard(e.storage)
        else:
            continue
        n = sign * e.nbytes
        total += n
        t = tag_now[e.tag] = tag_now.get(e.tag, 0) + n
        if t > tag_peak.get(e.tag, 0):
            tag_peak[e.tag] = t
        comp = component_of.get(e.tag, "temporaries")
        c = comp_now[comp] = comp_now.get(comp, 0) + n
        if c > comp_peak.get(comp, 0):
            comp_peak[comp] = c
        m = mod_now[e.module] = mod_now.get(e.module, 0) + n
        if m > mod_peak.get(e.module, 0):
            mod_peak[e.module] = m
        key = (e.step, e.phase)
        if key not in phase_peaks:
            # a phase starts with what the previous one left alive
            phase_peaks[key] = total - n if sign > 0 else total
        if total > phase_peaks[key]:
            phase_peaks[key] = total
        if sign > 0 and total > peak:
            peak, peak_seq, peak_phase, peak_step = total, e.seq, e.phase, e.step
    peak_live = live_at(events, peak_seq)
    steps: dict[int, int] = {}
    for (s, p), b in phase_peaks.items():
        if p != "setup":
            steps[s] = max(steps.get(s, 0), b)
    groups: dict[tuple[str, str], list[int]] = {}
    for e in peak_live.values():
        g = groups.setdefault((e.tag, e.module), [0, 0])
        g[0] += e.nbytes
        g[1] += 1
    live_groups = tuple(
        sorted((LiveGroup(t, m, b, n) for (t, m), (b, n) in groups.items()), key=lambda g: (-g.nbytes, g.tag, g.module))
    )
    tensors = sorted(peak_live.values(), key=lambda e: (-e.nbytes, e.seq))[:top]
    return Summary(
        peak_allocated=peak,
        peak_seq=peak_seq,
        peak_phase=peak_phase,
        peak_step=peak_step,
        by_tag={t: tag_peak.get(t, 0) for t in TAGS if t not in HOST_TAGS},
        by_component=comp_peak,
        by_module=tuple(sorted(mod_peak.items(), key=lambda kv: (-kv[1], kv[0]))),
        phase_peaks=tuple((s, p, b) for (s, p), b in phase_peaks.items()),
        step_peaks=tuple(sorted(steps.items())),
        live_at_peak=live_groups,
        top_tensors=tuple(LiveTensor(e.storage, e.nbytes, e.tag, e.module, e.op, e.phase, e.step) for e in tensors),
        final_live=total,
        host_peak=host_peak,
    )


def live_at(events: list[Event], seq: int) -> dict[int, Event]:
    """The storages alive just after event ``seq`` (their alloc events), by storage number."""
    live: dict[int, Event] = {}
    for e in events:
        if e.seq > seq:
            break
        if e.tag in HOST_TAGS:
            continue
        if e.action == "alloc":
            live[e.storage] = e
        else:
            live.pop(e.storage, None)
    return live


#: Default size of the downsampled memory timeline (TraceResult.timeline, reports).
TIMELINE_POINTS = 2_000


def memory_timeline(events: list[Event], *, max_points: int = TIMELINE_POINTS,
                    component_of: dict[str, str] | None = None) -> tuple[tuple[int, dict[str, int]], ...]:
    """Live bytes by category after events, thinned to at most ``max_points`` points.

    The stream is cut into ``max_points`` equal runs of events and each run keeps the point
    where its live total is largest, so every spike survives and the global peak is exact
    (PyTorch's memory viewer draws the same envelope). Categories are Breakdown components
    (``component_of``, default TAG_COMPONENT); host tags and unknown frees are skipped, as in
    :func:`summarize`.

    Args:
        events: the event stream, in order.
        max_points: most points returned (>= 1).
        component_of: tag to category.

    Returns:
        ``(seq, {category: live bytes})`` in event order; zero categories are left out.

    Raises:
        ValueError: ``max_points`` < 1.
    """
    if max_points < 1:
        raise ValueError(f"max_points={max_points} must be >= 1")
    component_of = component_of or TAG_COMPONENT
    live: set[int] = set()
    steps: list[tuple[int, str, int]] = []  # (seq, category, signed bytes) of counted events
    for e in events:
        if e.tag in HOST_TAGS:
            continue
        if e.action == "alloc":
            live.add(e.storage)
            steps.append((e.seq, component_of.get(e.tag, "temporaries"), e.nbytes))
        elif e.storage in live:
            live.discard(e.storage)
            steps.append((e.seq, component_of.get(e.tag, "temporaries"), -e.nbytes))
    totals: list[int] = []
    total = 0
    for _seq, _cat, nb in steps:
        total += nb
        totals.append(total)
    keep = set(peak_indices(totals, max_points))
    now: dict[str, int] = {}
    out: list[tuple[int, dict[str, int]]] = []
    for i, (seq, cat, nb) in enumerate(steps):
        now[cat] = now.get(cat, 0) + nb
        if i in keep:
            out.append((seq, {c: b for c, b in now.items() if b}))
    return tuple(out)


def write_timeline(events: list[Event], path: str) -> None:
    """Write the events as JSON lines (``.jsonl``) or CSV (``.csv``), chosen by the suffix."""
    with open(path, "w", newline="") as f:
        f.write(timeline_text(events, "csv" if str(path).endswith(".csv") else "jsonl"))


def timeline_text(events: list[Event], fmt: str = "jsonl") -> str:
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(Event.__slots__)
        for e in events:
            w.writerow([getattr(e, k) for k in Event.__slots__])
        return buf.getvalue()
    return "".join(json.dumps(e.to_dict(), separators=(",", ":")) + "\n" for e in events)
