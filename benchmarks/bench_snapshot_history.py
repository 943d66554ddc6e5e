"""Benchmark: `analyze_history` on synthetic allocation histories of 100,000 and 1,000,000 entries.

The history is the worst case for a peak search that copies the live set at each new peak: the
live set grows for the whole run (two allocations, then one free, over and over), so almost every
allocation is a new peak. 100,000 entries is ``_record_memory_history(max_entries=100000)``, the
README's own setting. Sizes and addresses come from a seeded generator: every run sees the same
history. Writes benchmarks/results/snapshot_history.json.

Run: python benchmarks/bench_snapshot_history.py [N ...]   (never part of the test suite)
"""

from __future__ import annotations

import json
import platform
import random
import sys
import time
from pathlib import Path

from vramlens.allocator.snapshot import analyze_history

ROOT = Path(__file__).resolve().parents[1]
FRAMES = [[{"filename": "train.py", "line": 10 + i, "name": "step"}] for i in range(16)]


def growing_history(n: int, seed: int = 0) -> list[dict]:
    """``n`` trace entries: alloc, alloc, free (the oldest live block), repeated; live set grows."""
    rng = random.Random(seed)
    out: list[dict] = []
    live: list[int] = []
    addr = 0x7F00_0000_0000
    oldest = 0
    while len(out) < n:
        for _ in range(2):
            size = rng.choice((512, 4096, 1 << 20, 3 << 20, 20 << 20))
            out.append({"action": "alloc", "addr": addr, "size": size, "frames": FRAMES[rng.randrange(16)]})
            live.append((addr, size))
            addr += 32 << 20
        a, s = live[oldest]
        oldest += 1
        out.append({"action": "free_completed", "addr": a, "size": s, "frames": []})
    return out[:n]


def main(sizes: list[int]) -> None:
    results = []
    for n in sizes:
        entries = growing_history(n)
        t0 = time.perf_counter()
        h = analyze_history(entries, 0, 0)
        dt = time.perf_counter() - t0
        print(f"{n:>9,} entries: {dt:8.3f} s  (peak allocated {h.peak_allocated_bytes:,} B)")
        results.append({"entries": n, "seconds": round(dt, 3), "peak_allocated_bytes": h.peak_allocated_bytes})
    out = ROOT / "benchmarks" / "results" / "snapshot_history.json"
    out.write_text(json.dumps({"python": platform.python_version(), "machine": platform.machine(),
                               "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [100_000, 1_000_000])
