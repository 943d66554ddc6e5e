"""The overhead of vramlens.watch on a small transformer's CPU training step (issue 10's target: <= 3 %).

A Llama-shaped model (hidden 512, 4 layers, vocab 8_000; batch 4 x 256 tokens, AdamW) trains for
a few steps bare and watched, interleaved round by round so that a busy machine slows both alike;
the median step time of each is compared. The watch runs with its defaults (store=False here so
the runs database is not touched).

Run: python benchmarks/bench_watch.py [--steps 8 --rounds 3]  (writes benchmarks/results/watch.json)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import transformers

import vramlens


def build():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=512, intermediate_size=1376, num_attention_heads=8,
                                   num_key_value_heads=8, num_hidden_layers=4, vocab_size=8_000,
                                   max_position_embeddings=512)
    model = transformers.LlamaForCausalLM(cfg).float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 8_000, (4, 256))
    return model, opt, ids


def steps(model, opt, ids, n: int, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds of each step; with ``cpu``, this process's CPU seconds of each step appended to it
    (less disturbed than wall time when other work shares the cores)."""
    out = []
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append(time.process_time() - c)
    return out


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    model, opt, ids = build()
    steps(model, opt, ids, 2)  # warm-up: optimizer state, allocator, kernels
    bare: list[float] = []
    watched: list[float] = []
    bare_cpu: list[float] = []
    watched_cpu: list[float] = []
    for _ in range(a.rounds):
        bare += steps(model, opt, ids, a.steps, bare_cpu)
        with vramlens.watch(model, opt, store=False) as w:
            watched += steps(model, opt, ids, a.steps, watched_cpu)
    b, w_ = statistics.median(bare), statistics.median(watched)
    bc, wc = statistics.median(bare_cpu), statistics.median(watched_cpu)
    result = {
        "model": "Llama-shaped, hidden 512, 4 layers, vocab 8000, fp32",
        "batch": [4, 256],
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "steps_each": len(bare),
        "bare_median_s": round(b, 5),
        "watched_median_s": round(w_, 5),
        "overhead_percent": round((w_ / b - 1) * 100, 2),
        "bare_cpu_median_s": round(bc, 5),
        "watched_cpu_median_s": round(wc, 5),
        "cpu_overhead_percent": round((wc / bc - 1) * 100, 2),
        "peak_allocated_bytes": w.report.peak_allocated_bytes,
    }
    out = Path(__file__).with_name("results") / "watch.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
