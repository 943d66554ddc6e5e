"""Hand-worked allocator scenarios: each expected figure follows from the rules step by step."""


import pytest

from vramlens.allocator import AllocatorConfig, Event, allocation_size, round_size, simulate
from vramlens.errors import InputError

KiB, MiB = 1024, 1024 * 1024


def A(i, size, stream=0):
    return ("alloc", i, size, stream)


def F(i):
    return ("free", i, 0)


EMPTY = ("empty_cache", None, 0)


def test_size_rules():
    assert round_size(1) == 512 and round_size(1000) == 1024 and round_size(1024) == 1024
    assert allocation_size(1024) == 2 * MiB  # small pool: 2 MiB segments
    assert allocation_size(1 * MiB) == 2 * MiB  # 1 MiB is still "small"
    assert allocation_size(1 * MiB + 512) == 20 * MiB  # 1 to 10 MiB: a 20 MiB segment
    assert allocation_size(10 * MiB) == 10 * MiB  # from 10 MiB: rounded to 2 MiB
    assert allocation_size(10 * MiB + 512) == 12 * MiB


def test_first_segments():
    r = simulate([A(1, 1000)])
    # 1000 B -> 1024 B block -> a new 2 MiB small segment
    assert (r.peak_reserved_bytes, r.peak_allocated_bytes, r.segments_at_peak) == (2 * MiB, 1024, 1)
    r = simulate([A(1, 1000), A(2, 5 * MiB), A(3, 30 * MiB)])
    # + 5 MiB -> a 20 MiB large segment, split (15 MiB left, > 1 MiB);
    # + 30 MiB -> a 30 MiB segment of its own: 2 + 20 + 30 = 52 MiB
    assert r.peak_reserved_bytes == 52 * MiB
    assert r.peak_allocated_bytes == 1024 + 5 * MiB + 30 * MiB
    assert r.fragmentation_bytes == 52 * MiB - (1024 + 35 * MiB)  # the 2 MiB and 20 MiB segments' free parts
    assert r.largest_free_block_at_peak == 15 * MiB
    assert r.segments_at_peak == 3


def test_free_and_reuse_split_and_no_split():
    r = simulate([A(1, 30 * MiB), F(1), A(2, 25 * MiB), A(3, 4 * MiB)])
    # 30 MiB segment; freed, cached; 25 MiB reuses it, 5 MiB remainder (> 1 MiB) is split off;
    # 4 MiB takes the 5 MiB remainder whole: 1 MiB left is not > 1 MiB, so no split.
    assert r.peak_reserved_bytes == 30 * MiB
    assert r.final_allocated_bytes == 25 * MiB + 5 * MiB
    assert r.num_device_alloc == 1


def test_coalescing_then_empty_cache():
    r = simulate([A(1, 2 * MiB), A(2, 3 * MiB), F(1), F(2), EMPTY])
    # both come from one 20 MiB segment; freeing both merges it back into one free block,
    # which empty_cache returns: reserved 0
    assert r.peak_reserved_bytes == 20 * MiB
    assert (r.final_reserved_bytes, r.final_segments) == (0, 0)
    r = simulate([A(1, 2 * MiB), A(2, 3 * MiB), F(1), EMPTY])
    # block 2 still lives in the segment: nothing can be returned; the freed 2 MiB is an
    # "inactive split" piece
    assert r.final_reserved_bytes == 20 * MiB


def test_small_pool_packing():
    k600 = 600 * KiB  # 614_400 B, a multiple of 512
    r = simulate([A(1, k600), A(2, k600), A(3, k600)])
    # 2 MiB = 2_097_152: 614_400 x 3 = 1_843_200 fit, each split leaves >= 512 B
    assert r.peak_reserved_bytes == 2 * MiB
    r = simulate([A(i, k600) for i in range(4)])
    # the 4th needs 614_400 but only 253_952 B remain: a second 2 MiB segment
    assert r.peak_reserved_bytes == 4 * MiB


def test_streams_have_their_own_pools_and_a_failure_frees_the_cache():
    events = [A(1, 30 * MiB, stream=1), F(1), A(2, 30 * MiB, stream=0)]
    r = simulate(events)
    # the cached 30 MiB block belongs to stream 1: stream 0 gets its own segment
    assert r.peak_reserved_bytes == 60 * MiB
    r = simulate(events, capacity=50 * MiB)
    # 30 + 30 > 50: cudaMalloc fails, release_cached_blocks returns stream 1's segment, retry works
    assert (r.peak_reserved_bytes, r.final_reserved_bytes, r.num_alloc_retries, r.num_ooms) == (30 * MiB, 30 * MiB, 1, 0)


def test_max_split_size():
    events = [A(1, 200 * MiB), F(1), A(2, 100 * MiB), A(3, 190 * MiB)]
    r = simulate(events)
    # default: 100 MiB splits the cached 200 MiB block (100 left); 190 MiB needs a new segment
    assert r.peak_reserved_bytes == 200 * MiB + 190 * MiB
    r = simulate(events, "max_split_size_mb:128")
    # 200 MiB is oversize (>= 128): it never serves the 100 MiB request -> new 100 MiB segment;
    # it serves 190 MiB (200 < 190 + 20), unsplit
    assert r.peak_reserved_bytes == 300 * MiB
    assert r.final_allocated_bytes == 100 * MiB + 200 * MiB


def test_max_non_split_rounding():
    events = [A(1, 200 * MiB), F(1), A(2, 170 * MiB)]
    # 200 >= 170 + 20: the oversize block is too big to hand out unsplit -> new 170 MiB segment
    assert simulate(events, "max_split_size_mb:128").peak_reserved_bytes == 370 * MiB
    # with a 40 MiB rounding limit, 200 < 170 + 40: it is reused
    assert simulate(events, "max_split_size_mb:128,max_non_split_rounding_mb:40").peak_reserved_bytes == 200 * MiB


def test_roundup_power2_divisions():
    conf = AllocatorConfig.parse("roundup_power2_divisions:4")
    # 1.2 MiB lies in [1 MiB, 2 MiB): 4 steps of 256 KiB -> 1.25 MiB
    assert round_size(1_258_291, conf) == 1_310_720
    assert round_size(1_258_291) == 1_258_496  # default: next multiple of 512
    assert round_size(2048, conf) == 2048  # not > 512 x 4: plain rounding
    conf = AllocatorConfig.parse("roundup_power2_divisions:[256:1,512:2,>:4]")
    assert round_size(300 * MiB + 1, conf) == 300 * MiB + 512  # 256-512 MiB: 1 division = plain
    assert round_size(3 * MiB + 1, conf) == 3 * MiB + 512  # 2-4 MiB interval also 1 (filled up to 256)


def test_expandable_segments():
    events = [A(1, 1000), A(2, 5 * MiB), A(3, 30 * MiB)]
    r = simulate(events, "expandable_segments:True")
    # small pool: one 2 MiB page. Large pool: 5 MiB maps one 20 MiB page; 30 MiB continues in the
    # same segment (15 MiB free + one more 20 MiB page = 35 MiB): 2 + 40 = 42 MiB (52 without)
    assert r.peak_reserved_bytes == 42 * MiB
    assert r.final_segments == 2
    r = simulate(events + [F(3), A(4, 10 * MiB), EMPTY], "expandable_segments:True")
    # freeing 3 merges with the 5 MiB remainder (35 MiB free from 5 to 40 MiB); 10 MiB takes its
    # first part (5-15 MiB); empty_cache unmaps the whole free page 20-40 MiB: 2 + 20 = 22 MiB
    assert r.final_reserved_bytes == 22 * MiB
    assert r.final_allocated_bytes == 1024 + 15 * MiB


def test_oom_with_fragmentation():
    events = [A(1, 6 * MiB), A(2, 6 * MiB), A(3, 6 * MiB), F(2), A(4, 12 * MiB)]
    r = simulate(events, capacity=30 * MiB)
    # 1, 2, 3 share one 20 MiB segment (6 + 6 + 6, 2 MiB left); freeing 2 leaves 6 MiB free
    # inside it. 12 MiB needs a 12 MiB segment: 20 + 12 > 30, nothing is wholly free to
    # release, the retry fails: OOM although 30 - 12 = 18 MiB are not allocated
    assert r.num_ooms == 1 and r.num_alloc_retries == 1
    (oom,) = r.oom_events
    assert (oom.index, oom.size, oom.allocated_bytes, oom.reserved_bytes, oom.fragmented) == (
        4, 12 * MiB, 12 * MiB, 20 * MiB, True)
    # 20 + 12 fits a 40 MiB card
    assert simulate(events, capacity=40 * MiB).num_ooms == 0


def test_garbage_collection_needs_a_memory_fraction():
    events = [A(1, 30 * MiB), F(1), A(2, 40 * MiB), F(2), A(3, 50 * MiB)]
    gc = "garbage_collection_threshold:0.5"
    r = simulate(events, gc, capacity=100 * MiB, memory_fraction=1.0)
    # before asking CUDA for 50 MiB: reserved 70 > 0.5 x 100, target 20 MiB. Ages (searches of the
    # large pool since each block was cached): block 1 = 2, block 2 = 1, mean 1.5 -> block 1
    # (30 MiB) goes. Then 40 + 50 = 90 MiB
    assert (r.final_reserved_bytes, r.num_alloc_retries) == (90 * MiB, 0)
    r = simulate(events, gc, capacity=100 * MiB)
    # without a fraction PyTorch skips gc: 70 + 50 > 100 fails, the cache is emptied, retry: 50
    assert (r.final_reserved_bytes, r.num_alloc_retries) == (50 * MiB, 1)


def test_event_shapes():
    evs = [Event(1, 1000), Event(1, 0, action="free"), {"action": "alloc", "id": 2, "size": 3 * MiB},
           ("alloc", 3, 10)]

    class TracerEvent:
        kind, storage_id, nbytes = "alloc", 9, 4 * MiB

    r = simulate(evs + [TracerEvent()])
    assert r.final_allocated_bytes == 3 * MiB + 512 + 4 * MiB
    with pytest.raises(InputError) as e:
        simulate([("grow", 1, 10)])
    assert str(e.value) == "event #0: action 'grow' is not one of alloc, free, empty_cache"
    with pytest.raises(InputError):
        simulate([("alloc", 1, -5)])
    assert simulate([A(1, 0)]).peak_reserved_bytes == 0  # PyTorch hands out no memory for 0 bytes


def test_the_tracers_events_replay_as_they_are():
    # vramlens.trace.events.Event names its storage ``storage``: two 4 MiB storages, one freed, then 2 MiB more; read
    # without the storage as the id, every event had the id None and each allocation freed the one before
    from vramlens.trace.events import Event as TraceEvent

    def ev(seq, action, storage, nbytes):
        return TraceEvent(seq, action, storage, nbytes, "temporary", "", "forward", 0, "empty")

    trace = [ev(0, "alloc", 0, 4 * MiB), ev(1, "alloc", 1, 4 * MiB), ev(2, "free", 0, 4 * MiB),
             ev(3, "alloc", 2, 2 * MiB)]
    r = simulate(trace)
    assert r.final_allocated_bytes == 6 * MiB and r.peak_allocated_bytes == 8 * MiB
    assert r == simulate([(e.action, e.storage, e.nbytes) for e in trace])


@pytest.mark.slow  # > 5 s on 2 cores (--durations)
def test_a_million_events_replay():
    import random

    rng = random.Random(0)
    events, live, nid = [], [], 0
    sizes = [256, 4096, 65536, 512 * KiB, 3 * MiB, 16 * MiB, 64 * MiB]
    while len(events) < 1_000_000:
        if live and (rng.random() < 0.5 or len(live) > 300):
            events.append(F(live.pop(rng.randrange(len(live)))))
        else:
            events.append(A(nid, int(rng.choice(sizes) * rng.uniform(0.5, 1.5))))
            live.append(nid)
            nid += 1
    r = simulate(events)  # benchmarks/bench_allocator.py times this (tests assert no wall-clock times)
    assert r.n_events == 1_000_000 and r.peak_reserved_bytes >= r.peak_allocated_bytes
