"""Estimator speed: one estimate, and a sweep of 10,000 workloads, on one core.

Run: python benchmarks/bench_estimate.py  (writes benchmarks/results/estimate.json)
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

from vramlens.estimator import estimate_spec
from vramlens.hardware.catalog import get_gpu
from vramlens.models import load_model
from vramlens.workload import Workload


def main() -> dict:
    spec = load_model("llama-2-7b")
    gpu = get_gpu("A100-80GB")
    w = Workload(mode="train", batch=4, seq=2048).validated()
    estimate_spec(spec, w, gpu)  # warm the per-spec caches
    n = 5000
    t = time.perf_counter()
    for _ in range(n):
        estimate_spec(spec, w, gpu)
    one_us = (time.perf_counter() - t) / n * 1e6

    grid = list(itertools.product(
        ("train", "inference"), ("full", "lora"), ("none", "full"), ("sdpa", "eager"),
        (1, 2, 4, 8, 16), (256, 512, 1024, 2048, 4096), ("adamw", "adamw-8bit", "sgd", "adafactor", "lion"),
        (1, 2, 4, 8, 16, 32, 64),
    ))[:10_000]
    workloads = [Workload(mode=m, method=me, checkpointing=c, attention=a, batch=b, seq=s, optimizer=o, lora_rank=r)
                 for m, me, c, a, b, s, o, r in grid]
    t = time.perf_counter()
    for wl in workloads:
        estimate_spec(spec, wl, gpu)
    sweep_s = time.perf_counter() - t
    result = {"model": spec.name, "one_estimate_us": round(one_us, 1), "sweep_workloads": len(workloads),
              "sweep_s": round(sweep_s, 3)}
    out = Path(__file__).parent / "results" / "estimate.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    print(main())
