"""A replay of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).

``simulate(events, conf=AllocatorConfig(), capacity=None)`` feeds an event stream (shapes in
:mod:`vramlens.allocator.events`) through a port of ``DeviceCachingAllocator`` and returns an
:class:`~vramlens.allocator.result.AllocatorResult`. Versions and their differences:
:mod:`vramlens.allocator.versions`. The rules, as in the C++ source:

- **Rounding** (``round_size``): requests under 512 B take 512 B; others round up to 512 B, or,
  with ``roundup_power2_divisions`` N > 1 for their power-of-two interval and size > 512 N, up to
  the next of N equal steps between two powers of two.
- **Pools** (``get_pool``): rounded sizes up to 1 MiB come from the small pool, others the large.
- **Segment sizes** (``get_allocation_size``): small pool 2 MiB; large requests under 10 MiB a
  20 MiB segment; larger ones their size rounded up to 2 MiB.
- **Best fit** (``get_free_block``): the smallest free block of the same stream and pool that is
  big enough; with ``max_split_size`` set, an oversize block (>= max_split_size) never serves
  a smaller request, and serves an oversize one only if at most ``max_non_split_rounding_size``
  bigger.
- **Splitting** (``should_split``): small pool (and expandable segments) when the remainder is at
  least 512 B; large pool when the remainder is over 1 MiB and the request under max_split_size.
- **Freeing** (``free_block``): a freed block merges with free neighbours of its segment; segments
  go back to CUDA only when wholly free, and only on ``empty_cache`` or when an allocation fails:
  first the oversize cached blocks (``release_available_cached_blocks``, with max_split_size),
  then every unsplit cached segment (``release_cached_blocks``), each followed by a retry.
- **Garbage collection**: with a memory fraction set and ``garbage_collection_threshold`` > 0,
  before asking CUDA for more, unsplit large cached blocks older than average are released until
  reserved memory is under threshold x allowed memory.
- **Expandable segments**: one growing segment per stream and pool, mapped in 2 MiB (small) or
  20 MiB (large) pages; free pages are unmapped by empty_cache or on a failed allocation.

Not modelled: cross-stream uses (``record_stream``; frees complete at once), CUDA graph private
pools, the cudaMallocAsync backend, IPC. Where the C++ would release a split or expandable block
in ``release_available_cached_blocks``/``garbage_collect_cached_blocks`` this port skips it.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable
from typing import Any

from vramlens.allocator.blocks import Block, BlockPool, ExpandableSegment
from vramlens.allocator.config import LARGE_BUFFER, AllocatorConfig
from vramlens.allocator.events import ALLOC, EMPTY_CACHE, normalize
from vramlens.allocator.expandable import ExpandableMixin
from vramlens.allocator.result import AllocatorResult, OOMEvent, Timeline
from vramlens.errors import InputError
from vramlens.units import BLOCK, round_up

K_MIN_BLOCK = BLOCK  # kMinBlockSize: every size is rounded to at least 512 bytes
K_SMALL_SIZE = 1 << 20  # kSmallSize: the largest "small" request is 1 MiB
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: small requests are packed in 2 MiB segments
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: requests from 1 to 10 MiB share 20 MiB segments
K_ROUND_LARGE = 2 << 20  # kRoundLarge: larger requests are rounded to 2 MiB
K_LARGE_BUFFER = LARGE_BUFFER  # kLargeBuffer: 20 MiB


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """The next of ``divisions`` equal steps between the powers of two around ``size``."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    low = size & ~(step - 1)
    return size if low == size else low + step


def round_size(size: int, conf: AllocatorConfig = AllocatorConfig()) -> int:
    """The block size the allocator uses for a request of ``size`` bytes (round_size)."""
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    divisions = conf.divisions_for(size)
    if divisions > 1 and size > K_MIN_BLOCK * divisions:
        return roundup_power2_next_division(size, divisions)
    return round_up(size, K_MIN_BLOCK)


def allocation_size(size: int) -> int:
    """The segment cudaMalloc'd for a rounded request that no cached block fits (get_allocation_size)."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return round_up(size, K_ROUND_LARGE)


class CachingAllocator(ExpandableMixin):
    """DeviceCachingAllocator for one device, driven by malloc/free/empty_cache calls.

    Args:
        conf: allocator settings.
        capacity: bytes the device can give this allocator (cudaMalloc fails beyond it); None
            for unlimited.
        memory_fraction: torch.cuda.set_per_process_memory_fraction; allocations beyond
            fraction x capacity fail, and garbage collection becomes active.
    """

    def __init__(self, conf: AllocatorConfig = AllocatorConfig(), capacity: int | None = None,
                 memory_fraction: float | None = None):
        if conf.backend != "native":
            raise InputError("backend:cudaMallocAsync is not simulated: it is CUDA's own pool allocator")
        if memory_fraction is not None and not 0.0 < memory_fraction <= 1.0:
            raise InputError(f"memory_fraction={memory_fraction} must be in (0, 1]")
        if memory_fraction is not None and capacity is None:
            raise InputError("memory_fraction needs a capacity to be a fraction of")
        self.conf = conf
        self.capacity = capacity
        self.allowed = int(memory_fraction * capacity) if memory_fraction is not None and capacity is not None else None
        self.gc_on = self.allowed is not None and conf.garbage_collection_threshold > 0
        self.max_split = conf.max_split_size
        self.expandable = conf.expandable_segments
        self.small = BlockPool(small=True)
        self.large = BlockPool(small=False)
        self.next_addr = 1 << 32
        self.exp_segments: list[ExpandableSegment] = []
        self.segments = 0  # cudaMalloc'd segments alive
        self.reserved = 0  # total_allocated_memory / reserved_bytes
        self.allocated = 0
        self.requested = 0
        self.inactive_split = 0
        self.num_alloc_retries = self.num_ooms = self.num_device_alloc = self.num_device_free = 0

    # ----------------------------------------------------------------------------- malloc
    def malloc(self, orig_size: int, stream: int) -> Block | None:
        """Allocate; None when the request fails after every retry (an OOM)."""
        size = round_size(orig_size, self.conf)
        pool = self.small if size <= K_SMALL_SIZE else self.large
        alloc_size = allocation_size(size)
        block = self.get_free_block(pool, stream, size)
        if block is None:
            if self.gc_on:
                self.garbage_collect()
            block = self.alloc_block(pool, stream, size, alloc_size, False)
            if block is None and self.release_available_cached_blocks(pool, stream, size):
                block = self.alloc_block(pool, stream, size, alloc_size, False)
            if block is None:
                self.release_cached_blocks()
                block = self.alloc_block(pool, stream, size, alloc_size, True)
            if block is None:
                self.num_ooms += 1
                return None
        return self.alloc_found_block(block, pool, size, orig_size, self.should_split(block, size))

    def should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.pool.small or self.expandable:
            return remaining >= K_MIN_BLOCK
        return (self.max_split is None or size < self.max_split) and remaining > K_SMALL_SIZE

    def get_free_block(self, pool: BlockPool, stream: int, size: int) -> Block | None:
        if self.gc_on:
            pool.gc_calls += 1
        keys = pool.keys
        i = pool.lower_bound(stream, size)
        n = len(keys)
        if i == n or keys[i][0] != stream:
            return None
        block = pool.free[keys[i][2]]
        if block.seg is not None:
            if self.expandable:
                def exp_size(b: Block) -> int:
                    nxt = b.next
                    return b.size + (nxt.size if nxt is not None and not nxt.mapped else 0)
                j = i + 1
                while block.seg is not None and j < n and keys[j][0] == stream:
                    cand = pool.free[keys[j][2]]
                    if exp_size(cand) >= exp_size(block):
                        break
                    block = cand
                    j += 1
            else:
                i += 1
                while i < n and keys[i][0] == stream and pool.free[keys[i][2]].seg is not None:
                    i += 1
                if i == n or keys[i][0] != stream:
                    return None
                block = pool.free[keys[i][2]]
        ms = self.max_split
        if ms is not None:
            if size < ms and block.size >= ms:
                return None
            if size >= ms and block.size >= size + self.conf.max_non_split_rounding_size:
                return None
        pool.remove(block)
        return block

    def alloc_found_block(self, block: Block, pool: BlockPool, size: int, orig_size: int, split: bool) -> Block:
        already_split = block.is_split()
        if split:
            remaining = block
            block = Block(remaining.addr, size, remaining.stream, pool, remaining.seg)
            block.prev = remaining.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.addr += size
            remaining.size -= size
            pool.insert(remaining)
            if block.seg is None:
                self.inactive_split += -size if already_split else remaining.size
        elif already_split and block.seg is None:
            self.inactive_split -= block.size
        block.allocated = True
        block.requested = orig_size
        self.allocated += block.size
        self.requested += orig_size
        return block

    def alloc_block(self, pool: BlockPool, stream: int, size: int, alloc_size: int, retry: bool) -> Block | None:
        if retry:
            self.num_alloc_retries += 1
        if self.allowed is not None and self.reserved + alloc_size > self.allowed:
            return None
        if self.expandable:
            return self.try_allocate_expandable_block(pool, stream, size)
        if self.capacity is not None and self.reserved + alloc_size > self.capacity:
            return None
        block = Block(self.next_addr, alloc_size, stream, pool)
        self.next_addr += alloc_size
        self.reserved += alloc_size
        self.segments += 1
        self.num_device_alloc += 1
        return block

    # ----------------------------------------------------------------------------- free
    def free(self, block: Block) -> None:
        block.allocated = False
        self.allocated -= block.size
        self.requested -= block.requested
        self.free_block(block)

    def free_block(self, block: Block) -> None:
        pool = block.pool
        net = 0
        for cand in (block.prev, block.next):
            net -= self.try_merge_blocks(block, cand, pool)
        pool.insert(block)
        if block.is_split():
            net += block.size
        if block.seg is None:
            self.inactive_split += net

    def try_merge_blocks(self, dst: Block, src: Block | None, pool: BlockPool) -> int:
        """Merge free ``src`` into ``dst``; returns the bytes taken over (0 if none)."""
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # ----------------------------------------------------------------------------- release
    def release_block(self, block: Block) -> None:
        block.pool.remove(block)
        self.reserved -= block.size
        self.segments -= 1
        self.num_device_free += 1

    def release_available_cached_blocks(self, pool: BlockPool, stream: int, size: int) -> bool:
        ms = self.max_split
        if ms is None:
            return False
        key = max(size, ms)
        i = pool.lower_bound(stream, key)
        keys = pool.keys
        if i < len(keys) and keys[i][0] == stream:
            block = pool.block_at(i)
            if block.is_split() or block.seg is not None:
                return False
            self.release_block(block)
            return True
        released = 0
        i -= 1
        while released < key and i >= 0 and keys[i][0] == stream and keys[i][1] >= ms:
            block = pool.block_at(i)
            i -= 1
            if block.is_split() or block.seg is not None:
                continue
            released += block.size
            self.release_block(block)
        return released >= key

    def release_cached_blocks(self) -> None:
        """empty_cache(): every wholly free segment goes back; free expandable pages are unmapped."""
        for pool in (self.large, self.small):
            to_unmap = []
            for block in list(pool.free.values()):
                if block.seg is not None:
                    to_unmap.append(block)
                elif block.prev is None and block.next is None:
                    self.release_block(block)
            for block in to_unmap:
                if block.addr in pool.free and pool.free[block.addr] is block:
                    self.unmap_block(block)
                    if block.prev is None and block.next is None and not block.mapped:
                        pool.remove_unmapped(block)
                        assert block.seg is not None  # to_unmap holds expandable blocks only
                        self.exp_segments.remove(block.seg)

    def garbage_collect(self) -> None:
        assert self.allowed is not None  # called only when gc_on, which needs a memory fraction
        threshold = int(self.conf.garbage_collection_threshold * self.allowed)
        if self.reserved <= threshold:
            return
        target = self.reserved - threshold
        pool = self.large
        candidates = [b for b in pool.free.values() if not b.is_split() and b.seg is None]
        if not candidates:
            return
        total_age = sum(pool.gc_calls - b.gc_base for b in candidates)
        count = len(candidates)
        reclaimed, freed = 0, True
        while reclaimed < target and freed and count > 0:
            age_threshold = total_age / count
            freed = False
            for b in [pool.block_at(i) for i in range(len(pool.keys))]:
                if b.is_split() or b.seg is not None or b.addr not in pool.free:
                    continue
                age = pool.gc_calls - b.gc_base
                if age >= age_threshold:
                    freed = True
                    reclaimed += b.size
                    total_age -= age
                    count -= 1
                    self.release_block(b)

    # ----------------------------------------------------------------------------- views
    def segment_sizes(self, live: Iterable[Block] = ()) -> list[int]:
        """Sizes of the segments (mapped ranges for expandable ones), largest first."""
        sizes = []
        heads = [b for pool in (self.small, self.large) for b in pool.free.values() if b.prev is None]
        heads += [b for b in live if b.prev is None]
        for head in heads:
            if head.seg is None:
                total = 0
                b: Block | None = head
                while b is not None:
                    total += b.size
                    b = b.next
                sizes.append(total)
        for seg in self.exp_segments:
            run = 0
            for m in seg.mapped:
                if m:
                    run += seg.page
                elif run:
                    sizes.append(run)
                    run = 0
            if run:
                sizes.append(run)
        return sorted(sizes, reverse=True)

    def largest_free_block(self) -> int:
        return max(self.small.largest(), self.large.largest())

    def segment_count(self) -> int:
        """Segments as a snapshot lists them: cudaMalloc'd ones plus each mapped range."""
        ranges = 0
        for seg in self.exp_segments:  # count the 0 -> 1 transitions of the page map
            ranges += seg.mapped.count(b"\x00\x01") + (1 if seg.mapped[:1] == b"\x01" else 0)
        return self.segments + ranges


def simulate(
    events: Iterable[Any],
    conf: AllocatorConfig | str | None = None,
    capacity: int | None = None,
    *,
    memory_fraction: float | None = None,
    max_points: int = 2048,
) -> AllocatorResult:
    """Replay an event stream through the caching allocator.

    Args:
        events: allocator calls, in order (shapes: :mod:`vramlens.allocator.events`).
        conf: settings, or a PYTORCH_CUDA_ALLOC_CONF string; None for PyTorch's defaults.
        capacity: bytes available to the allocator (device capacity minus context and other
            libraries); a request that cannot be met then counts as an OOM event and is skipped
            (its later free is ignored). None: unlimited.
        memory_fraction: as torch.cuda.set_per_process_memory_fraction (activates
            garbage_collection_threshold, as in PyTorch).
        max_points: size of the compressed timeline.

    Returns:
        AllocatorResult with peaks, fragmentation, OOM events and the timeline.

    Raises:
        InputError: a malformed event or a bad config string. Frees of ids never allocated are
            ignored (a trace may start mid-run).
    """
    if conf is None or isinstance(conf, str):
        conf = AllocatorConfig.parse(conf)
    a = CachingAllocator(conf, capacity, memory_fraction)
    live: dict[Hashable, Block] = {}
    streams: dict[Hashable, int] = {0: 0}
    alloc_trace, reserved_trace = array("q"), array("q")
    peak_reserved = peak_alloc = peak_req = 0
    at_peak = (0, 0, 0, 0)  # allocated, inactive_split, largest free, segments
    ooms: list[OOMEvent] = []
    index = -1
    for index, (action, ident, size, stream) in enumerate(normalize(events)):
        if action == ALLOC:
            s = streams.get(stream)
            if s is None:
                s = streams[stream] = len(streams)
            if size == 0:
                live.pop(ident, None)  # PyTorch returns a null pointer for 0 bytes
            else:
                block = a.malloc(size, s)
                if block is None:
                    free_total = (capacity if capacity is not None else 0) - a.allocated
                    ooms.append(OOMEvent(index, size, s, a.allocated, a.reserved, capacity or 0,
                                         free_total >= size))
                    live.pop(ident, None)
                else:
                    old = live.get(ident)
                    if old is not None:
                        a.free(old)  # an id reused without its free: the old storage is gone
                    block.ident = ident
                    live[ident] = block
                    if a.allocated > peak_alloc:
                        peak_alloc = a.allocated
                    if a.requested > peak_req:
                        peak_req = a.requested
                if a.reserved > peak_reserved:
                    peak_reserved = a.reserved
                    at_peak = (a.allocated, a.inactive_split, a.largest_free_block(), a.segment_count())
        elif action == EMPTY_CACHE:
            a.release_cached_blocks()
        else:
            block = live.pop(ident, None)
            if block is not None:
                a.free(block)
        alloc_trace.append(a.allocated)
        reserved_trace.append(a.reserved)
    return AllocatorResult(
        peak_reserved_bytes=peak_reserved,
        peak_allocated_bytes=peak_alloc,
        peak_requested_bytes=peak_req,
        allocated_at_peak_reserved=at_peak[0],
        fragmentation_bytes=peak_reserved - at_peak[0],
        inactive_split_bytes_at_peak=at_peak[1],
        largest_free_block_at_peak=at_peak[2],
        segments_at_peak=at_peak[3],
        final_reserved_bytes=a.reserved,
        final_allocated_bytes=a.allocated,
        final_largest_free_block=a.largest_free_block(),
        final_segments=a.segment_count(),
        num_alloc_retries=a.num_alloc_retries,
        num_ooms=a.num_ooms,
        num_device_alloc=a.num_device_alloc,
        num_device_free=a.num_device_free,
        oom_events=tuple(ooms),
        timeline=Timeline.from_arrays(alloc_trace, reserved_trace, max_points),
        n_events=index + 1,
        capacity_bytes=capacity,
        config=conf,
        final_segment_sizes=tuple(a.segment_sizes(live.values())),
    )
