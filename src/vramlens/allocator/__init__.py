"""PyTorch's CUDA caching allocator, simulated; memory snapshots, read safely.

Public names: :func:`simulate` (replay an event stream), :class:`Event`, :class:`AllocatorConfig`
and :func:`parse_alloc_conf` (PYTORCH_CUDA_ALLOC_CONF), :class:`AllocatorResult`,
:func:`round_size` / :func:`allocation_size` (the allocator's size rules), the first-order
:func:`estimate_reserved` for the estimator, and :func:`predict_device_total`.
"""

from vramlens.allocator.config import AllocatorConfig, parse_alloc_conf
from vramlens.allocator.events import Event
from vramlens.allocator.result import AllocatorResult, OOMEvent, Timeline
from vramlens.allocator.simulator import CachingAllocator, allocation_size, round_size, simulate

__all__ = [
    "AllocatorConfig",
    "AllocatorResult",
    "CachingAllocator",
    "Event",
    "OOMEvent",
    "Timeline",
    "allocation_size",
    "parse_alloc_conf",
    "round_size",
    "simulate",
]
