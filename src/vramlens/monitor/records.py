"""What a watched run measured: frozen values with their JSON form (pure Python, no torch).

A :class:`WatchReport` holds one :class:`StepRecord` per recorded optimizer step, the
:class:`Leak` finding (or None) and the :class:`OomReport` post-mortem (or None).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vramlens.units import human_bytes

#: The categories every step is split into; together they make the live total at the step's peak.
CATEGORIES: tuple[str, ...] = (
    "parameters",                   # parameters and buffers of the watched model
    "gradients",                    # .grad of its parameters
    "optimizer_states",             # tensors in optimizer.state (moments, step counters)
    "activations_and_temporaries",  # everything else allocated while watching
    "other",                        # alive before the watch began and in no registry (CUDA only)
)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One recorded optimizer step (or ``every`` of them).

    Attributes:
        step: the optimizer step that ends this record (1-based).
        peak_allocated_bytes: largest live total of tensors since the previous record.
        peak_reserved_bytes: largest total held by the CUDA caching allocator (None on CPU).
        live_bytes: live total just after the step.
        retained_bytes: live bytes allocated in an earlier step and in no registry (what a leak
            grows); None where the backend cannot tell (CUDA).
        device_total_bytes: the device's used memory as NVML reports it (None without NVML).
        host_rss_bytes: resident memory of this process and its children, from /proc (None elsewhere).
        categories: bytes by category (CATEGORIES) at the peak.
    """

    step: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None
    live_bytes: int
    retained_bytes: int | None
    device_total_bytes: int | None
    host_rss_bytes: int | None
    categories: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class LeakSite:
    """Where surviving tensors were allocated: the innermost user frame first, then its callers."""

    where: str                  # "file.py:12 in forward"
    stack: tuple[str, ...]      # up to a few user frames, innermost first
    nbytes: int
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "stack": list(self.stack), "nbytes": self.nbytes, "count": self.count}


@dataclass(frozen=True, slots=True)
class Leak:
    """Live memory that grows from step to step.

    Attributes:
        bytes_per_step: the Theil-Sen slope of the measured series over the window.
        measured: which series grew: "retained" (tensors allocated in an earlier step, CPU)
            or "live" (the live total after each step, CUDA).
        first_step, last_step: the window the slope was fitted on.
        sites: allocation sites of the surviving tensors, largest first (empty where unknown).
    """

    bytes_per_step: int
    measured: str
    first_step: int
    last_step: int
    sites: tuple[LeakSite, ...] = ()

    def text(self) -> str:
        lines = [f"leak: {human_bytes(self.bytes_per_step)} per step ({self.measured} bytes, "
                 f"steps {self.first_step} to {self.last_step}, Theil-Sen slope)"]
        for s in self.sites:
            lines.append(f"  {human_bytes(s.nbytes)} in {s.count} tensor(s) allocated at {s.where}")
            lines += [f"      called from {frame}" for frame in s.stack[1:]]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"bytes_per_step": self.bytes_per_step, "measured": self.measured, "first_step": self.first_step,
                "last_step": self.last_step, "sites": [s.to_dict() for s in self.sites]}


@dataclass(frozen=True, slots=True)
class Fix:
    """One of the advisor's plans, as the `vramlens estimate` flags that differ from the workload."""

    flags: tuple[str, ...]
    device_total_bytes: int
    fits: bool
    tradeoffs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"flags": list(self.flags), "device_total_bytes": self.device_total_bytes, "fits": self.fits,
                "tradeoffs": list(self.tradeoffs)}


@dataclass(frozen=True, slots=True)
class OomReport:
    """The post-mortem of an out-of-memory error.

    Attributes:
        kind: "device" (CUDA), "cpu_limit" (the CPU backend's cap) or "host" (MemoryError).
        requested_bytes: the allocation that failed, where known.
        limit_bytes: the cap or the device's capacity, where known.
        live_bytes: bytes alive when it failed.
        categories: those bytes by category.
        by_module: bytes alive by the module that allocated them, largest first (when a model is watched).
        step: the optimizer steps done before the failure.
        estimate_bytes: vramlens' analytic estimate of the device total for the same workload, when given.
        fixes: the advisor's cheapest plans that fit, as estimate flags.
        error: the error's own first line.
        notes: what could not be done (no workload given, advisor failed), one line each.
    """

    kind: str
    requested_bytes: int | None
    limit_bytes: int | None
    live_bytes: int
    categories: dict[str, int]
    by_module: dict[str, int]
    step: int
    estimate_bytes: int | None = None
    fixes: tuple[Fix, ...] = ()
    error: str = ""
    notes: tuple[str, ...] = ()
    snapshot_path: str | None = None

    def text(self) -> str:
        what = {"device": "CUDA out of memory", "cpu_limit": "out of memory (the CPU cap of vramlens.watch)",
                "host": "host out of memory (MemoryError)"}.get(self.kind, self.kind)
        head = f"vramlens post-mortem: {what} after {self.step} optimizer step(s)"
        lines = [head]
        if self.requested_bytes is not None:
            cap = f" with {human_bytes(self.live_bytes)} alive" + (
                f" of {human_bytes(self.limit_bytes)}" if self.limit_bytes is not None else "")
            lines.append(f"  failing allocation: {human_bytes(self.requested_bytes)} ({self.requested_bytes:,} B){cap}")
        lines.append("  alive by category: " + ", ".join(
            f"{c.replace('_', ' ')} {human_bytes(b)}" for c, b in self.categories.items() if b))
        if self.by_module:
            top = list(self.by_module.items())[:5]
            lines.append("  alive by module: " + ", ".join(f"{m or '<outside modules>'} {human_bytes(b)}" for m, b in top))
        if self.estimate_bytes is not None:
            lines.append(f"  vramlens estimate for this workload: {human_bytes(self.estimate_bytes)} on the device")
        for i, f in enumerate(self.fixes, 1):
            verdict = "fits" if f.fits else "does not fit"
            lines.append(f"  fix {i}: vramlens estimate ... {' '.join(f.flags)}  ({human_bytes(f.device_total_bytes)}, {verdict})")
        if self.snapshot_path:
            lines.append(f"  memory snapshot: {self.snapshot_path} (open it with vramlens snapshot)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("kind", "requested_bytes", "limit_bytes", "live_bytes", "categories",
                                            "by_module", "step", "estimate_bytes", "error", "snapshot_path")}
        d["fixes"] = [f.to_dict() for f in self.fixes]
        d["notes"] = list(self.notes)
        return d


@dataclass(frozen=True, slots=True)
class WatchReport:
    """Everything a watched run measured.

    Attributes:
        backend: "cuda" or "cpu".
        device: the device's name ("NVIDIA H100 80GB HBM3", "cpu").
        steps: one record per ``every`` optimizer steps, in order.
        leak: live memory that grows, or None.
        oom: the post-mortem of an out-of-memory error, or None.
        environment: torch version, device, GPU name, Python, platform.
        notes: what the run could not measure, one line each.
        run_id: the row of the runs database it was stored under (None when not stored).
    """

    backend: str
    device: str
    steps: tuple[StepRecord, ...]
    leak: Leak | None = None
    oom: OomReport | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    run_id: int | None = None

    @property
    def peak_allocated_bytes(self) -> int:
        return max((s.peak_allocated_bytes for s in self.steps), default=0)

    def text(self) -> str:
        """A few lines for a terminal."""
        lines = [f"vramlens watch ({self.backend}, {self.device}): {len(self.steps)} step record(s), "
                 f"peak allocated {human_bytes(self.peak_allocated_bytes)}"]
        if self.steps:
            peak = max(self.steps, key=lambda s: s.peak_allocated_bytes)
            lines.append("  at the peak (step %d): " % peak.step + ", ".join(
                f"{c.replace('_', ' ')} {human_bytes(b)}" for c, b in peak.categories.items() if b))
        lines.append(self.leak.text() if self.leak else "no leak found")
        if self.oom:
            lines.append(self.oom.text())
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "device": self.device,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "steps": [s.to_dict() for s in self.steps],
            "leak": self.leak.to_dict() if self.leak else None,
            "oom": self.oom.to_dict() if self.oom else None,
            "environment": dict(self.environment),
            "notes": list(self.notes),
            "run_id": self.run_id,
        }

    def to_html(self) -> str:
        """A self-contained HTML page: the per-step timeline stacked by category and the findings."""
        from vramlens.monitor.html import render

        return render(self.to_dict())


def report_from_dict(d: dict[str, Any]) -> WatchReport:
    """Rebuild a WatchReport from :meth:`WatchReport.to_dict` (the runs database stores that form)."""
    leak = d.get("leak")
    oom = d.get("oom")
    return WatchReport(
        backend=d["backend"],
        device=d["device"],
        steps=tuple(StepRecord(**s) for s in d.get("steps", ())),
        leak=Leak(leak["bytes_per_step"], leak["measured"], leak["first_step"], leak["last_step"],
                  tuple(LeakSite(s["where"], tuple(s["stack"]), s["nbytes"], s["count"]) for s in leak["sites"]))
        if leak else None,
        oom=OomReport(**{**oom, "fixes": tuple(Fix(tuple(f["flags"]), f["device_total_bytes"], f["fits"],
                                                    tuple(f["tradeoffs"])) for f in oom["fixes"]),
                         "notes": tuple(oom["notes"])}) if oom else None,
        environment=dict(d.get("environment") or {}),
        notes=tuple(d.get("notes") or ()),
        run_id=d.get("run_id"),
    )
