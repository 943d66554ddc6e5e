"""First-order model of the caching allocator's reserve over live tensors.

PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) never hands memory back
while a segment holds a live block, and sizes segments by request: requests up to 1 MiB come
from 2 MiB small-pool segments (kSmallBuffer), requests below 10 MiB (kMinLargeAlloc) from
20 MiB segments (kLargeBuffer), larger ones from a segment rounded up to 2 MiB (kRoundLarge).
The model: persistent tensors waste at most one 2 MiB rounding each (half on average), and
the peak's transient working set is served from segments rounded to 20 MiB. The exact figure,
from an event stream, comes from :mod:`vramlens.allocator`.
"""

from __future__ import annotations

from vramlens.units import MiB, round_up

K_ROUND_LARGE = 2 * MiB    # kRoundLarge
K_LARGE_BUFFER = 20 * MiB  # kLargeBuffer


def reserved_estimate(peak_allocated: int, *, persistent_bytes: int, transient_bytes: int, n_persistent: int = 0) -> int:
    """Predicted ``max_memory_reserved`` for a given ``max_memory_allocated``."""
    persistent = round_up(max(0, persistent_bytes), K_ROUND_LARGE) + n_persistent * (K_ROUND_LARGE // 2)
    transient = round_up(max(0, transient_bytes), K_LARGE_BUFFER)
    return max(peak_allocated, persistent + transient)
