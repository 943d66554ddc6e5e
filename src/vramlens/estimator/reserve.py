"""The caching allocator's reserve over live tensors, for the estimator.

Uses :mod:`vramlens.allocator.analytic` (the allocator's segment rules applied to the tensors
alive all step, plus a measured allowance for the short-lived ones); the persistent tensors'
sizes come from the model's inventory, so the per-tensor rounding to 2 MiB and the packing of
mid-sized tensors into 20 MiB segments are exact. Every function takes the run's
PYTORCH_CUDA_ALLOC_CONF (Workload.alloc_conf; None: PyTorch's defaults).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import TYPE_CHECKING

from vramlens.estimator.memo import identity_cache
from vramlens.models.spec import ModelSpec

if TYPE_CHECKING:
    from vramlens.allocator.config import AllocatorConfig


@lru_cache(maxsize=256)
def allocator_config(alloc_conf: str | None) -> AllocatorConfig:
    """The allocator settings of a PYTORCH_CUDA_ALLOC_CONF string (the Workload validated it), memoized."""
    from vramlens.allocator.config import parse_alloc_conf

    return parse_alloc_conf(alloc_conf)


@identity_cache
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
    sizes: Counter[int] = Counter()
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


@identity_cache
def persistent_part_reserve(spec: ModelSpec, parts: tuple[tuple[int, int, bool], ...],
                            alloc_conf: str | None = None) -> tuple[int, int]:
    """(bytes reserved for the persistent tensors, their bytes rounded to blocks), memoized per spec, parts and
    allocator settings."""
    from vramlens.allocator.analytic import persistent_reserved
    from vramlens.allocator.simulator import round_size

    sizes = persistent_sizes(spec, list(parts))
    conf = allocator_config(alloc_conf)
    return persistent_reserved(sizes, conf), sum(round_size(size, conf) * n for size, n in sizes.items())


_TRANSIENT: dict[tuple[int, str | None, int | None], int] = {}


def transient_reserve(transient_bytes: int, alloc_conf: str | None = None, loss_tensor: int | None = None) -> int:
    """Reserve for ``transient_bytes`` of short-lived tensors under ``alloc_conf`` (allocator.analytic, memoized);
    ``loss_tensor``: a training step's largest loss tensor, which sets the allowance (None: inference's share)."""
    key = (transient_bytes, alloc_conf or None, loss_tensor)
    hit = _TRANSIENT.get(key)
    if hit is None:
        from vramlens.allocator.analytic import reserved_breakdown

        hit = reserved_breakdown((), transient_bytes, conf=allocator_config(alloc_conf),
                                 loss_tensor_bytes=loss_tensor).transient_bytes
        if len(_TRANSIENT) > 100_000:
            _TRANSIENT.clear()
        _TRANSIENT[key] = hit
    return hit
