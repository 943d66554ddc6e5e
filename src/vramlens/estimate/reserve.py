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


def reserved_estimate(spec: ModelSpec, peak_allocated: int, persistent_parts: list[tuple[int, int, bool]],
                      persistent_bytes: int) -> tuple[int, str]:
    """Predicted ``max_memory_reserved`` and the rule, in words."""
    from vramlens.allocator.analytic import reserved_breakdown

    est = reserved_breakdown(persistent_sizes(spec, persistent_parts), max(0, peak_allocated - persistent_bytes))
    return max(est.reserved_bytes, peak_allocated), est.explain
