"""TraceResult: what a trace measured, as the shared Breakdown plus the details behind it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vramlens.estimator.breakdown import Breakdown, make_breakdown
from vramlens.trace.events import (
    INFERENCE_COMPONENT,
    TAG_COMPONENT,
    TIMELINE_POINTS,
    Event,
    Summary,
    memory_timeline,
)
from vramlens.workload import Workload

_EXPLAIN = {
    "weights": "traced: parameters and buffers (tags parameter, buffer)",
    "master_weights": "traced: fp32 master copies or autocast's cached half copies of fp32 weights",
    "gradients": "traced: .grad of trainable parameters (and fp32 master gradients)",
    "optimizer_states": "traced: optimizer.state tensors (step counters stay on the host)",
    "activations": "traced: alive from forward into backward (saved tensors), plus inputs; "
                   "inference: the prefill/decode working set",
    "kv_cache": "traced: the model's DynamicCache keys and values (and a recurrent block's conv and SSM state)",
    "temporaries": "traced: everything else (freed within the op, module or phase), its own peak",
    "comm_buffers": "traced: FSDP all-gather outputs and unsharded parameters",
    "runtime": "not traced: CUDA context and library workspaces live outside the allocator",
}


def components_of(summary: Summary, training: bool) -> dict[str, int]:
    """Breakdown components from a trace's per-component peaks.

    In inference (summarised with events.INFERENCE_COMPONENT) the working set of prefill and
    decode is what the Breakdown calls activations.
    """
    return {c: summary.by_component.get(c, 0) for c in set(TAG_COMPONENT.values())}


@dataclass(frozen=True)
class TraceResult:
    """A measured breakdown, the summary it came from and the event stream.

    Attributes:
        breakdown: the Breakdown (source "trace" or "trace-extrapolated").
        summary: peaks by tag, module, phase and step, and the live set at the peak.
        events: the event stream (of the traced model; for an extrapolated trace, of the
            largest truncated model).
        params / trainable_params: parameter counts of the traced (full) model.
        step_peaks: (step, peak bytes) for every step (extrapolated when layers is set).
        per_layer: bytes each block adds to each component (the lines' slopes; extrapolated traces only;
            for a hybrid layer pattern, a period's slope over its blocks).
        truncated: blocks of the two truncated models an extrapolated trace ran.
        cuda: torch.cuda max_memory_allocated / max_memory_reserved in mode "cuda".
    """

    breakdown: Breakdown
    summary: Summary
    events: tuple[Event, ...]
    workload: Workload
    model_name: str
    params: int
    trainable_params: int
    backend: str
    steps: int
    step_peaks: tuple[tuple[int, int], ...]
    phase_peaks: tuple[tuple[int, str, int], ...]
    layers: int | None = None
    n_layers: int = 0
    cuda: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    per_layer: dict[str, int] = field(default_factory=dict)
    #: blocks of the two truncated models an extrapolated trace ran (whole periods of a hybrid's layer pattern)
    truncated: tuple[int, int] | None = None

    @property
    def peak_allocated(self) -> int:
        return self.breakdown.peak_allocated

    def timeline(self, max_points: int = TIMELINE_POINTS) -> tuple[tuple[int, dict[str, int]], ...]:
        """Live bytes by Breakdown component over the event stream, at most ``max_points`` points.

        Categories follow the breakdown (in inference the working set is "activations"). For an
        extrapolated trace the events, and so the timeline, are the largest truncated model's.

        Returns:
            ``(event seq, {component: live bytes})`` in order, the peak kept exactly.
        """
        return memory_timeline(list(self.events), max_points=max_points,
                               component_of=TAG_COMPONENT if self.workload.training else INFERENCE_COMPONENT)

    def to_dict(self, *, top: int = 10, timeline_points: int = 0) -> dict[str, Any]:
        """The `vramlens estimate --json` schema, plus the trace's own details.

        Args:
            top: modules and tensors alive at the peak to list.
            timeline_points: when > 0, add ``"timeline"``: ``[[seq, {component: bytes}], ...]``
                from :meth:`timeline` (left out by default to keep the object small).
        """
        s = self.summary
        d: dict[str, Any] = {
            "model": {"name": self.model_name, "params": self.params, "trainable_params": self.trainable_params,
                      "layers": self.n_layers},
            "workload": self.workload.to_dict(),
        }
        d.update(self.breakdown.to_dict())
        d["trace"] = {
            "backend": self.backend,
            "steps": self.steps,
            "extrapolated_from_layers": self.layers,
            "truncated_layers": list(self.truncated) if self.truncated else None,
            "seconds": round(self.seconds, 3),
            "step_peaks": [{"step": st, "peak_bytes": b} for st, b in self.step_peaks],
            "phase_peaks": [{"step": st, "phase": p, "peak_bytes": b} for st, p, b in self.phase_peaks],
            "by_tag": dict(s.by_tag),
            "top_modules_at_peak": [
                {"module": m, "bytes": b} for m, b in top_modules(s, top)
            ],
            "live_at_peak": [
                {"tag": g.tag, "module": g.module, "bytes": g.nbytes, "count": g.count} for g in s.live_at_peak[:top]
            ],
            "top_tensors_at_peak": [
                {"bytes": t.nbytes, "tag": t.tag, "module": t.module, "op": t.op, "phase": t.phase, "step": t.step}
                for t in s.top_tensors[:top]
            ],
            "events": len(self.events),
        }
        if self.cuda:
            d["trace"]["cuda"] = dict(self.cuda)
        if timeline_points > 0:
            d["timeline"] = [[seq, by] for seq, by in self.timeline(timeline_points)]
        return d


def top_modules(s: Summary, n: int) -> list[tuple[str, int]]:
    """Modules holding the most bytes at the peak (storages grouped by the module that made them)."""
    by: dict[str, int] = {}
    for g in s.live_at_peak:
        by[g.module or "<top>"] = by.get(g.module or "<top>", 0) + g.nbytes
    return sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def make_trace_breakdown(summary: Summary, *, training: bool, source: str, notes: list[str],
                         phases: tuple[tuple[str, int], ...], peak_reserved: int | None = None,
                         components: dict[str, int] | None = None, peak_allocated: int | None = None,
                         peak_phase: str | None = None, host_bytes: int | None = None,
                         workload: Workload | None = None) -> Breakdown:
    """The trace's Breakdown. With ``workload``, device_total adds what the estimator adds to the
    reserve (vramlens.estimator.runtime, on its reference GPU): the cuBLAS workspaces, which the
    trace does not see, and the CUDA context and NCCL buffers outside the allocator; the runtime
    component says how much (the tensors are traced, those parts are modelled)."""
    comps = dict(components if components is not None else components_of(summary, training))
    peak = summary.peak_allocated if peak_allocated is None else peak_allocated
    reserved = peak if peak_reserved is None else peak_reserved
    outside = 0
    explain = _EXPLAIN
    if workload is not None:
        from vramlens.estimator.runtime import REFERENCE_GPU, runtime

        rt = runtime(None, workload)
        outside = rt.workspace_bytes + rt.outside_allocator_bytes
        comps["runtime"] = outside
        explain = dict(_EXPLAIN, runtime=f"not traced, modelled as the estimator does on {REFERENCE_GPU}: "
                                         + rt.explain.replace("\n", "; "))
    return make_breakdown(
        comps, explain,
        peak_allocated=peak,
        peak_reserved=reserved,
        device_total=reserved + outside,
        peak_phase=summary.peak_phase if peak_phase is None else peak_phase,
        phases=phases,
        source=source,
        notes=tuple(notes),
        host_bytes=summary.host_peak if host_bytes is None else host_bytes,
    )
