"""Benchmark: candidate plans the advisor evaluates per second on one core, and fit latency.

Each case is a full ``vramlens.advise.search`` from cold (a new memo per call, as every
``vramlens fit`` does): enumeration, the memoized exact evaluation of every candidate
(:mod:`vramlens.advise.fastmem`), the cost model of those that fit, and the final
``estimate_spec`` of the plans returned. The model is Llama-2-7B (config as published); one
warm-up call first so that imports and the estimator's per-spec summaries do not count.
Writes benchmarks/results/advise.json.

Run: python benchmarks/bench_advise.py   (never part of the test suite)
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "advise"))

from advise_specs import llama7b  # noqa: E402

from vramlens.advise import search  # noqa: E402
from vramlens.hardware.catalog import get_gpu  # noqa: E402
from vramlens.workload import Workload  # noqa: E402

CASES = [
    ("train 7B, 1 x RTX-4090", Workload(mode="train", batch=8, seq=2048), "RTX-4090", 1, 1),
    ("train 7B, 1 x A100-80GB", Workload(mode="train", batch=8, seq=2048), "A100-80GB", 1, 1),
    ("train 7B, 8 x A100-80GB", Workload(mode="train", batch=8, seq=2048), "A100-80GB", 8, 1),
    ("train 7B, 2 nodes x 8 x H100, effective batch 256", Workload(mode="train", batch=16, seq=4096),
     "H100-SXM-80GB", 8, 2),
    ("inference 7B, 4 x L4", Workload(mode="inference", batch=8, seq=4096, new_tokens=512), "L4", 4, 1),
]


def run(repeats: int = 3) -> dict:
    spec = llama7b()
    search(spec, CASES[0][1], get_gpu(CASES[0][2]))  # warm-up
    rows = []
    for name, w, gpu, gpus, nodes in CASES:
        g = get_gpu(gpu)
        best = None
        for _ in range(repeats):
            t = time.perf_counter()
            r = search(spec, w, g, gpus=gpus, nodes=nodes)
            dt = time.perf_counter() - t
            best = dt if best is None else min(best, dt)
        rows.append({"case": name, "evaluated": r.evaluated, "fitting": r.fitting, "seconds": round(best, 4),
                     "plans_per_s": round(r.evaluated / best), "best": r.plans[0].settings if r.plans else None})
    training = [x for x in rows if x["case"].startswith("train")]
    total_eval = sum(x["evaluated"] for x in training)
    total_s = sum(x["seconds"] for x in training)
    return {
        "benchmark": "advise: candidate plans evaluated per second (one core, cold memo per fit)",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cases": rows,
        "training_plans_per_s_overall": round(total_eval / total_s),
        "max_fit_latency_s": max(x["seconds"] for x in rows),
    }


if __name__ == "__main__":
    result = run()
    out = ROOT / "benchmarks" / "results" / "advise.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for row in result["cases"]:
        print(f"{row['case']:<52} {row['evaluated']:>7,} plans {row['seconds']:>7.3f} s {row['plans_per_s']:>9,}/s")
    print(f"overall (training): {result['training_plans_per_s_overall']:,} plans/s; "
          f"slowest fit {result['max_fit_latency_s']:.3f} s")
