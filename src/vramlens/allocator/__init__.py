"""PyTorch's CUDA caching allocator, simulated; memory snapshots, read safely.

- :func:`simulate` replays an event stream (shapes: :mod:`vramlens.allocator.events`) through a
  port of ``c10/cuda/CUDACachingAllocator.cpp`` (PyTorch 2.4+; versions:
  :mod:`vramlens.allocator.versions`) and returns an :class:`AllocatorResult`.
- :func:`parse_alloc_conf` / :class:`AllocatorConfig`: PYTORCH_CUDA_ALLOC_CONF.
- :func:`estimate_reserved`: the first-order reserved model the estimator calls (microseconds).
- :func:`predict_device_total`: peak allocated -> reserved -> nvidia-smi.
- :func:`load_report`: a snapshot pickle (restricted unpickler) or memory_stats JSON, explained;
  :func:`replay_snapshot` compares a recorded history with the simulator.
"""

from vramlens.allocator.analytic import (
    ReservedEstimate,
    estimate_reserved,
    persistent_reserved,
    reserved_breakdown,
)
from vramlens.allocator.config import AllocatorConfig, parse_alloc_conf
from vramlens.allocator.events import Event
from vramlens.allocator.predict import DevicePrediction, predict_device_total, predict_published_case
from vramlens.allocator.replay import ReplayComparison, replay_snapshot, trace_to_events
from vramlens.allocator.result import AllocatorResult, OOMEvent, Timeline
from vramlens.allocator.simulator import CachingAllocator, allocation_size, round_size, simulate
from vramlens.allocator.snapshot import SnapshotReport, load_report, safe_loads

__all__ = [
    "AllocatorConfig",
    "AllocatorResult",
    "CachingAllocator",
    "DevicePrediction",
    "Event",
    "OOMEvent",
    "ReplayComparison",
    "ReservedEstimate",
    "SnapshotReport",
    "Timeline",
    "allocation_size",
    "estimate_reserved",
    "load_report",
    "parse_alloc_conf",
    "persistent_reserved",
    "predict_device_total",
    "predict_published_case",
    "replay_snapshot",
    "reserved_breakdown",
    "round_size",
    "safe_loads",
    "simulate",
    "trace_to_events",
]
