"""expandable_segments:True: one segment per stream and pool that maps pages as it grows.

A port of ``find_expandable_block``, ``map_block``, ``try_allocate_expandable_block`` and
``unmap_block`` of c10/cuda/CUDACachingAllocator.cpp (Note [Expandable Segments]): a segment
reserves address space for 1 1/8 of the device memory and maps physical pages of 2 MiB (small
pool) or 20 MiB (large pool) at its lowest free addresses; a failed allocation or empty_cache
unmaps the pages that are wholly free. Mixed into
:class:`~vramlens.allocator.simulator.CachingAllocator`, whose state it uses.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, TypeGuard

from vramlens.allocator.blocks import Block, BlockPool, ExpandableSegment
from vramlens.units import ceil_div

K_SMALL_BUFFER = 2 << 20  # small-pool page
K_LARGE_BUFFER = 20 << 20  # large-pool page
_UNLIMITED_ADDRESS_SPACE = 1 << 40  # address space when no capacity is given


class ExpandableMixin:
    """Expandable-segment methods of the caching allocator."""

    # the state of CachingAllocator these methods use (declared for the type checker only)
    capacity: int | None
    next_addr: int
    exp_segments: list[ExpandableSegment]
    reserved: int
    num_device_alloc: int
    num_device_free: int

    if TYPE_CHECKING:
        def try_merge_blocks(self, dst: Block, src: Block | None, pool: BlockPool) -> int: ...

    def _new_exp_segment(self, pool: BlockPool) -> ExpandableSegment:
        page = K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER
        device = self.capacity if self.capacity is not None else _UNLIMITED_ADDRESS_SPACE
        npages = ceil_div(device + device // 8, page)
        seg = ExpandableSegment(self.next_addr, page, npages)
        self.next_addr += seg.size
        self.exp_segments.append(seg)
        return seg

    def find_expandable_block(self, pool: BlockPool, stream: int, size: int) -> Block:
        def allocatable(b: Block | None) -> TypeGuard[Block]:
            return b is not None and not b.allocated

        def has_space(b: Block | None) -> bool:
            got = 0
            while got < size and allocatable(b):
                got += b.size
                b = b.next
            return got >= size

        keys = pool.unmapped_keys
        i = bisect_left(keys, (stream, -1))
        while i < len(keys) and keys[i][0] == stream:
            c = pool.unmapped[keys[i][1]]
            if allocatable(c.prev):
                c = c.prev
            if has_space(c):
                return c
            i += 1
        seg = self._new_exp_segment(pool)
        cand = Block(seg.base, seg.size, stream, pool, seg)
        cand.mapped = False
        pool.insert_unmapped(cand)
        return cand

    def map_block(self, to_map: Block, size: int) -> bool:
        seg = to_map.seg
        assert seg is not None  # only blocks of expandable segments are mapped
        page = seg.page
        begin = (to_map.addr - seg.base) // page
        end = -(-(to_map.addr + size - seg.base) // page)
        mapped = (end - begin) * page
        if self.capacity is not None and self.reserved + mapped > self.capacity:
            return False  # cuMemCreate fails part-way; PyTorch releases the pages it got
        for p in range(begin, end):
            seg.mapped[p] = 1
        pool = to_map.pool
        pool.remove_unmapped(to_map)
        to_map.mapped = True
        if mapped < to_map.size:
            rest = Block(to_map.addr + mapped, to_map.size - mapped, to_map.stream, pool, seg)
            rest.mapped = False
            rest.splice(to_map, to_map.next)
            pool.insert_unmapped(rest)
            to_map.size = mapped
        self.try_merge_blocks(to_map, to_map.prev, pool)
        self.try_merge_blocks(to_map, to_map.next, pool)
        pool.insert(to_map)
        self.reserved += mapped
        self.num_device_alloc += 1
        return True

    def try_allocate_expandable_block(self, pool: BlockPool, stream: int, size: int) -> Block | None:
        cand = self.find_expandable_block(pool, stream, size)
        if not cand.mapped and not self.map_block(cand, min(cand.size, size)):
            return None
        while cand.size < size:
            nxt = cand.next
            assert nxt is not None  # find_expandable_block checked the space ahead
            if not self.map_block(nxt, min(size - cand.size, nxt.size)):
                return None
            cand = nxt
        pool.remove(cand)
        return cand

    def unmap_block(self, block: Block) -> None:
        seg, pool = block.seg, block.pool
        assert seg is not None  # only blocks of expandable segments are unmapped
        page = seg.page
        begin = -(-(block.addr - seg.base) // page)
        end = (block.addr + block.size - seg.base) // page
        if begin >= end:
            return
        for p in range(begin, end):
            seg.mapped[p] = 0
        start, length = seg.base + begin * page, (end - begin) * page
        pool.remove(block)
        before = start - block.addr
        if before > 0:
            b = Block(block.addr, before, block.stream, pool, seg)
            b.splice(block.prev, block)
            pool.insert(b)
        after = block.size - before - length
        if after > 0:
            a = Block(start + length, after, block.stream, pool, seg)
            a.splice(block, block.next)
            pool.insert(a)
        block.addr, block.size, block.mapped = start, length, False
        self.try_merge_blocks(block, block.prev, pool)
        self.try_merge_blocks(block, block.next, pool)
        pool.insert_unmapped(block)
        self.reserved -= length
        self.num_device_free += 1
