"""Benchmark: trace a Llama-2-7B training step and compare with PyTorch's MemTracker.

Llama-2-7B (config as published), bf16 weights, batch 1, seq 512, AdamW (foreach=True, as on
CUDA), two optimizer steps, under FakeTensorMode on the CPU. Three runs in one process,
after one small warm-up trace so that imports do not count against anyone:

1. torch.distributed._tools.mem_tracker.MemTracker around the same model build and steps;
2. vramlens.trace.trace (whole model);
3. vramlens.trace.trace with layers=3 (traces 2 and 3 layers, extrapolates to 32).

Each run's wall time includes building the model (meta, then to_empty under fake tensors);
peak RSS is read from /proc/self/status (VmHWM, reset between runs through
/proc/self/clear_refs where the kernel allows). Writes benchmarks/results/bench_trace.json.

Run: python benchmarks/bench_trace.py   (never part of the test suite)
"""

from __future__ import annotations

import gc
import json
import os
import platform
import sys
import time

import torch

LLAMA_2_7B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "vocab_size": 32000,
}
SEQ, BATCH, STEPS = 512, 1, 2


def _hwm_mib() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def run_memtracker() -> dict:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import AutoConfig, LlamaForCausalLM

    t0 = time.perf_counter()
    cfg = AutoConfig.for_model(**{k: v for k, v in LLAMA_2_7B.items() if k != "architectures"})
    with torch.device("meta"):
        model = LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    cfg.use_cache = False
    with FakeTensorMode(allow_non_fake_inputs=True):
        model.to_empty(device="cpu")
        model.tie_weights()
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        mt = MemTracker()
        mt.track_external(model, opt)
        with mt:
            for _ in range(STEPS):
                ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ))
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                del loss
                opt.step()
                opt.zero_grad(set_to_none=True)
                mt.reset_mod_stats()  # MemTracker refuses a module's second call otherwise
        peak = max(v["Total"] for v in mt.get_tracker_snapshot("peak").values())
    return {"seconds": time.perf_counter() - t0, "peak_bytes": int(peak)}


def run_vramlens(layers: int | None) -> dict:
    from vramlens.trace import trace

    t0 = time.perf_counter()
    r = trace(LLAMA_2_7B, mode="train", dtype="bf16", optimizer="adamw", batch=BATCH, seq=SEQ, steps=STEPS,
              layers=layers)
    return {"seconds": time.perf_counter() - t0, "peak_bytes": r.peak_allocated,
            "step_peaks": dict(r.step_peaks), "peak_phase": r.breakdown.peak_phase,
            "components": r.breakdown.as_dict()}


def main() -> None:
    from vramlens.trace import trace

    # warm-up: imports and first-use costs, on a tiny model, for every run alike
    trace({**LLAMA_2_7B, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 128}, mode="train", seq=16)
    out: dict = {"model": "llama-2-7b", "dtype": "bf16", "batch": BATCH, "seq": SEQ, "optimizer": "adamw foreach",
                 "steps": STEPS, "torch": torch.__version__, "python": platform.python_version(),
                 "cpus": os.cpu_count(), "runs": {}}
    for name, fn in (("memtracker", run_memtracker), ("vramlens", lambda: run_vramlens(None)),
                     ("vramlens_layers3", lambda: run_vramlens(3))):
        gc.collect()
        reset = _reset_hwm()
        res = fn()
        res["peak_rss_mib"] = round(_hwm_mib(), 1)
        res["rss_reset_between_runs"] = reset
        out["runs"][name] = res
        print(f"{name}: {res['seconds']:.2f} s, peak {res['peak_bytes'] / 2**30:.2f} GiB, "
              f"RSS {res['peak_rss_mib']:.0f} MiB", file=sys.stderr)
    mt = out["runs"]["memtracker"]["seconds"]
    out["speedup_vs_memtracker"] = round(mt / out["runs"]["vramlens"]["seconds"], 2)
    out["speedup_vs_memtracker_extrapolated"] = round(mt / out["runs"]["vramlens_layers3"]["seconds"], 2)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench_trace.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(json.dumps({k: v for k, v in out.items() if k.startswith("speedup")}), file=sys.stderr)


if __name__ == "__main__":
    main()
