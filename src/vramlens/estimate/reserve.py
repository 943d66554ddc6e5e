"""The caching allocator's reserve over live tensors, for the estimator.

Uses :func:`vramlens.allocator.analytic.reserved_breakdown` (the allocator's segment rules
applied to the tensors alive all step, plus a measured allowance for the short-lived ones);
the persistent tensors' sizes come from the model's inventory, so the per-tensor rounding to
2 MiB and the packing of mid-sized tensors into 20 MiB segments are exact.
"""

from __future__ import annotations

from collections import Counter

from vramlens.estimate.inventory import _identity_cache
from vramlens.models.spec import ModelSpec


@_identity_cache
def numel_histogram(spec: ModelSpec) -> tuple[tuple[int, int], ...]:
    """(elements, count) of the model's parameters."""
    return tuple(Counter(t.numel for t in spec.tensors if t.role != "buffer").items())


def persistent_sizes(spec: ModelSpec, parts: list[tuple[int, int, bool]]) -> dict[int, int]:
    """Size -> count of the persistent tensors.

    Args:
        parts: (bytes per element, total bytes, per_parameter) for each persistent component;
            per_parameter components have one tensor per model parameter (unsharded weights,
            gradients, optimizer states); the others are one flat buffer (sharded or quantized).
    """
    sizes: Counter = Counter()
    hist = numel_histogram(spec)
    for elem_bytes, total, per_param in parts:
        if total <= 0:
            continue
        if per_param:
            for numel, count in hist:
                sizes[numel * elem_bytes] += count
        else:
            sizes[total] += 1
    return dict(sizes)


@_identity_cache
def _persistent(spec: ModelSpec, parts: tuple[tuple[int, int, bool], ...]) -> tuple[int, int]:
    """(bytes reserved for the persistent tensors, their allocated bytes), memoized per spec and parts."""
    from vramlens.allocator.analytic import persistent_reserved
    from vramlens.allocator.config import AllocatorConfig
    from vramlens.allocator.simulator import round_size

    sizes = persistent_sizes(spec, list(parts))
    conf = AllocatorConfig()
    return persistent_reserved(sizes, conf), sum(round_size(size, conf) * n for size, n in sizes.items())


def reserved_estimate(spec: ModelSpec, peak_allocated: int, persistent_parts: list[tuple[int, int, bool]],
                      persistent_bytes: int) -> tuple[int, str]:
    """Predicted ``max_memory_reserved`` and the rule, in words.

    The persistent part is memoized (it depends on the model and the sharding, not on batch or
    sequence); the short-lived part follows :func:`vramlens.allocator.analytic.reserved_breakdown`.
    """
    from vramlens.allocator.analytic import reserved_breakdown

    transient = max(0, peak_allocated - persistent_bytes)
    pers, floor = _persistent(spec, tuple(persistent_parts))
    short = reserved_breakdown((), transient)
    total = max(pers + short.transient_bytes, floor + transient, peak_allocated)
    return total, short.explain
