"""Blocks and pools: the data structures of CUDACachingAllocator.cpp, in Python.

A Block is a run of device memory inside a segment, free or allocated, linked to its
neighbours in the same segment (``prev``/``next``). A BlockPool keeps its free blocks ordered
by (stream, size, address), exactly as the C++ ``std::set`` with ``BlockComparatorSize``, so
that best fit is one ``bisect``; for expandable segments it also keeps the unmapped ranges
ordered by (stream, address) (``BlockComparatorAddress``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Hashable


class ExpandableSegment:
    """One reserved virtual range that maps physical pages on demand.

    Attributes:
        base: first address.
        page: page size: 2 MiB for the small pool, 20 MiB for the large one.
        npages: pages of address space (1 1/8 of the device memory, as PyTorch reserves).
        mapped: per page, whether physical memory backs it.
    """

    __slots__ = ("base", "page", "npages", "mapped")

    def __init__(self, base: int, page: int, npages: int):
        self.base, self.page, self.npages = base, page, npages
        self.mapped = bytearray(npages)

    @property
    def size(self) -> int:
        return self.page * self.npages


class Block:
    __slots__ = ("addr", "size", "stream", "pool", "allocated", "prev", "next", "requested", "seg",
                 "mapped", "gc_base", "ident")

    def __init__(self, addr: int, size: int, stream: int, pool: BlockPool, seg: ExpandableSegment | None = None):
        self.addr = addr
        self.size = size
        self.stream = stream
        self.pool = pool
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.requested = 0
        self.seg = seg
        self.mapped = True
        self.gc_base = 0
        self.ident: Hashable = None  # the event id of the allocation it holds

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def splice(self, before: Block | None, after: Block | None) -> None:
        """Insert self between ``before`` and ``after`` (Block::splice)."""
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        state = "alloc" if self.allocated else ("free" if self.mapped else "unmapped")
        return f"Block({self.addr:#x}, {self.size}, stream={self.stream}, {state})"


class BlockPool:
    """Free blocks of one pool (small: requests <= 1 MiB; large: the rest)."""

    __slots__ = ("small", "keys", "free", "unmapped_keys", "unmapped", "gc_calls")

    def __init__(self, small: bool):
        self.small = small
        self.keys: list[tuple[int, int, int]] = []  # (stream, size, addr), sorted
        self.free: dict[int, Block] = {}  # addr -> free mapped block
        self.unmapped_keys: list[tuple[int, int]] = []  # (stream, addr), sorted
        self.unmapped: dict[int, Block] = {}
        self.gc_calls = 0

    def insert(self, b: Block) -> None:
        b.gc_base = self.gc_calls
        insort(self.keys, (b.stream, b.size, b.addr))
        self.free[b.addr] = b

    def remove(self, b: Block) -> None:
        keys = self.keys
        i = bisect_left(keys, (b.stream, b.size, b.addr))
        del keys[i]
        del self.free[b.addr]

    def insert_unmapped(self, b: Block) -> None:
        insort(self.unmapped_keys, (b.stream, b.addr))
        self.unmapped[b.addr] = b

    def remove_unmapped(self, b: Block) -> None:
        i = bisect_left(self.unmapped_keys, (b.stream, b.addr))
        del self.unmapped_keys[i]
        del self.unmapped[b.addr]

    def lower_bound(self, stream: int, size: int) -> int:
        """Index of the first free block of ``stream`` with at least ``size`` bytes."""
        return bisect_left(self.keys, (stream, size, -1))

    def block_at(self, i: int) -> Block:
        return self.free[self.keys[i][2]]

    def largest(self) -> int:
        """The largest free block of any stream, bytes (0 if none)."""
        keys, best, i = self.keys, 0, len(self.keys)
        while i > 0:
            stream, size, _ = keys[i - 1]
            best = max(best, size)
            i = bisect_left(keys, (stream, -1, -1))
        return best
