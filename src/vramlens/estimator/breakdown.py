"""Breakdown: the one result type shared by the estimator, the tracer and the allocator.

Every component is a byte count with a one-line explanation of where it comes from. A
component's figure is its own largest size during the step (what a tracer reports as the
peak of that tag); ``peak_allocated`` is the largest total of live tensors at any moment
(``torch.cuda.max_memory_allocated``), which is not the sum of the component peaks because
activations are gone by the time the optimizer runs. ``peak_reserved`` adds the caching
allocator's cached and fragmented segments (``max_memory_reserved``); ``device_total`` adds
what lives outside the allocator (CUDA context, library workspaces): what nvidia-smi shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Component names in display order; every Breakdown has all of them (0 when they do not apply).
COMPONENTS: tuple[str, ...] = (
    "weights",           # the model's parameters and buffers as stored on the GPU (adapters included)
    "master_weights",    # fp32 master copy (DeepSpeed-style) or autocast's half-precision weight cache
    "gradients",         # .grad of every trainable parameter
    "optimizer_states",  # Adam moments, momentum buffers, 8-bit states with their quantization constants
    "activations",       # tensors saved for backward (training) or the prefill working set (inference)
    "kv_cache",          # keys and values of past tokens (inference)
    "temporaries",       # the largest transient: logits upcast at the loss, foreach optimizer buffers
    "comm_buffers",      # DDP gradient buckets, FSDP/ZeRO all-gather and reduce-scatter buffers
    "runtime",           # CUDA context, cuBLAS/cuDNN workspaces, NCCL: outside PyTorch's allocator count
)

#: Components whose bytes come from PyTorch's caching allocator (counted by memory_allocated).
ALLOCATOR_COMPONENTS: tuple[str, ...] = COMPONENTS[:-1]


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    bytes: int
    explain: str = ""


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Per-GPU memory of one workload, by component, with the three peaks users see.

    Attributes:
        components: one Component per name in COMPONENTS, in that order.
        peak_allocated: largest sum of live tensors (max_memory_allocated), bytes.
        peak_reserved: the caching allocator's largest reservation (max_memory_reserved), bytes.
        device_total: peak_reserved plus memory outside the allocator (nvidia-smi), bytes.
        peak_phase: where peak_allocated happens ("forward", "backward", "optimizer",
            "prefill", "decode", "load").
        host_bytes: host (CPU) RAM that offloading or loading needs, bytes.
        phases: the live total at each phase's peak, bytes, for the curious.
        source: "estimate", "trace", "trace-extrapolated", "snapshot", ...
    """

    components: tuple[Component, ...]
    peak_allocated: int
    peak_reserved: int
    device_total: int
    peak_phase: str = ""
    host_bytes: int = 0
    phases: tuple[tuple[str, int], ...] = ()
    source: str = "estimate"
    notes: tuple[str, ...] = field(default=())

    def __getitem__(self, name: str) -> int:
        for c in self.components:
            if c.name == name:
                return c.bytes
        raise KeyError(name)

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    def as_dict(self) -> dict[str, int]:
        """Component name to bytes, in display order."""
        return {c.name: c.bytes for c in self.components}

    def largest(self, exclude: tuple[str, ...] = ("runtime",)) -> Component:
        """The component to attack first."""
        return max((c for c in self.components if c.name not in exclude), key=lambda c: c.bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "components": self.as_dict(),
            "explanations": {c.name: c.explain for c in self.components},
            "peak_allocated_bytes": self.peak_allocated,
            "peak_reserved_bytes": self.peak_reserved,
            "device_total_bytes": self.device_total,
            "peak_phase": self.peak_phase,
            "host_bytes": self.host_bytes,
            "phases": dict(self.phases),
            "source": self.source,
            "notes": list(self.notes),
        }


def make_breakdown(
    values: dict[str, int],
    explain: dict[str, str] | None = None,
    **kwargs: Any,
) -> Breakdown:
    """Build a Breakdown from a name->bytes mapping; missing components are 0.

    Raises:
        KeyError: a name that is not one of COMPONENTS.
    """
    unknown = set(values) - set(COMPONENTS)
    if unknown:
        raise KeyError(f"unknown components {sorted(unknown)}; known: {COMPONENTS}")
    explain = explain or {}
    comps = tuple(Component(n, int(values.get(n, 0)), explain.get(n, "")) for n in COMPONENTS)
    return Breakdown(components=comps, **kwargs)
