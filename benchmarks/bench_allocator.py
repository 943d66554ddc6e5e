"""Allocator and catalog speed: the analytic reserve estimate, a million-event replay, catalog look-ups.

Run: python benchmarks/bench_allocator.py  (writes benchmarks/results/allocator.json)
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from vramlens.allocator.analytic import estimate_reserved
from vramlens.allocator.simulator import simulate
from vramlens.models import load_model

KiB, MiB = 1024, 1024**2


def main() -> dict:
    layers = {4096 * 4096 * 2: 4 * 32 * 3, 4096 * 11008 * 2: 3 * 32 * 3, 4096 * 2: 65 * 3, 32000 * 4096 * 2: 6}
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        estimate_reserved(layers, 3 * 1024**3)
    analytic_us = (time.perf_counter() - t) / n * 1e6

    rng = random.Random(0)
    events, live, nid = [], [], 0
    sizes = [256, 4096, 65536, 512 * KiB, 3 * MiB, 16 * MiB, 64 * MiB]
    while len(events) < 1_000_000:
        if live and (rng.random() < 0.5 or len(live) > 300):
            events.append(("free", live.pop(rng.randrange(len(live))), 0))
        else:
            events.append(("alloc", nid, int(rng.choice(sizes) * rng.uniform(0.5, 1.5)), 0))
            live.append(nid)
            nid += 1
    t = time.perf_counter()
    simulate(events)
    replay_s = time.perf_counter() - t

    load_model("llama-3.1-405b")
    t = time.perf_counter()
    for _ in range(10_000):
        load_model("llama-3.1-405b")
    lookup_us = (time.perf_counter() - t) / 10_000 * 1e6

    out = {"analytic_reserve_us": round(analytic_us, 1), "replay_1m_events_s": round(replay_s, 2),
           "catalog_lookup_us": round(lookup_us, 2)}
    path = Path(__file__).parent / "results" / "allocator.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
