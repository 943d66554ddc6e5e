"""Capacity speed: one `vramlens.capacity` estimate per engine (model and GPU by name, as the CLI passes them).

Run: python benchmarks/bench_capacity.py  (writes benchmarks/results/capacity.json)
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from vramlens.serving import capacity


def main() -> dict:
    result: dict = {"model": "llama-2-7b", "gpu": "A100-80GB"}
    for engine in ("vllm", "sglang", "llama.cpp", "transformers"):
        capacity("llama-2-7b", engine, gpu="A100-80GB", context=4096)  # warm the catalog and per-spec caches
        n = 2000
        t = time.perf_counter()
        for _ in range(n):
            capacity("llama-2-7b", engine, gpu="A100-80GB", context=4096)
        result[f"{engine}_us"] = round((time.perf_counter() - t) / n * 1e6, 1)
    out = Path(__file__).parent / "results" / "capacity.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    print(main())
