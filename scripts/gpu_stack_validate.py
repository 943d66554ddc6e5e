"""Real-size models under each training technique: torch.cuda's peak against the estimate.

Where gpu_validate.py checks the tracer on shrunk models, this runs catalog models at their
real size (random weights, real configs) through vramlens's own training and inference steps
on CUDA (``trace(..., backend="cuda")``) under the techniques the estimator models: pure bf16
and fp32 weights with bf16 autocast, eager attention, full checkpointing, LoRA, the optimizer
in backward, chunked and fused-linear losses, activation offload, KV-cache decoding, and task
heads. For each case it records ``torch.cuda.max_memory_allocated`` /
``max_memory_reserved`` next to the analytic estimate of the same workload.

Without CUDA, ``--backend fake`` runs the same cases through the fake-tensor trace instead
(no GPU, no memory used): that is how the script is checked on a CPU machine, and it gives
the fake trace's column for the same cases.

Run: python scripts/gpu_stack_validate.py [--out validation/stack-gpu.json] [--only NAME] [--budget S]
Without CUDA and without --backend fake it prints "skipped: <reason>", writes nothing, exits 0.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from vramlens.trace.common import cuda_unavailable_reason  # noqa: E402

TRAIN = {"mode": "train", "dtype": "bf16", "optimizer": "adamw"}

#: name -> (catalog model, workload settings). Small enough that every case runs in seconds
#: on one GPU, large enough that weights, activations and logits are all gigabytes.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2.5-0.5b/bf16": ("qwen2.5-0.5b", {**TRAIN, "batch": 4, "seq": 1024}),
    "qwen2.5-0.5b/ckpt": ("qwen2.5-0.5b", {**TRAIN, "batch": 4, "seq": 1024, "checkpointing": "full"}),
    "qwen2.5-0.5b/eager": ("qwen2.5-0.5b", {**TRAIN, "batch": 2, "seq": 1024, "attention": "eager"}),
    "qwen2.5-0.5b/amp": ("qwen2.5-0.5b", {**TRAIN, "dtype": "fp32", "amp": "bf16", "batch": 4, "seq": 1024}),
    "qwen2.5-0.5b/loss-chunks8": ("qwen2.5-0.5b", {**TRAIN, "batch": 4, "seq": 1024, "loss_chunks": 8}),
    "qwen2.5-0.5b/fused-linear": ("qwen2.5-0.5b", {**TRAIN, "batch": 4, "seq": 1024, "loss": "fused-linear"}),
    "qwen2.5-0.5b/opt-in-bwd": ("qwen2.5-0.5b", {**TRAIN, "batch": 4, "seq": 1024, "optimizer_in_backward": True}),
    "qwen2.5-0.5b/act-offload": ("qwen2.5-0.5b", {**TRAIN, "batch": 4, "seq": 1024, "activation_offload": True,
                                                   "checkpointing": "full"}),
    "llama-3.2-1b/bf16": ("llama-3.2-1b", {**TRAIN, "batch": 2, "seq": 2048}),
    "llama-3.2-1b/ckpt-chunks": ("llama-3.2-1b", {**TRAIN, "batch": 4, "seq": 2048, "checkpointing": "full",
                                                  "loss_chunks": 8}),
    "llama-3.2-1b/lora": ("llama-3.2-1b", {**TRAIN, "method": "lora", "lora_rank": 16, "batch": 4, "seq": 2048}),
    "llama-3.2-1b/infer-decode": ("llama-3.2-1b", {"mode": "inference", "dtype": "bf16", "batch": 8, "seq": 2048,
                                                   "new_tokens": 64}),
    "gpt2-medium/amp": ("gpt2-medium", {**TRAIN, "dtype": "fp32", "amp": "bf16", "batch": 8, "seq": 1024}),
    "pythia-410m/bf16": ("pythia-410m", {**TRAIN, "batch": 8, "seq": 2048}),
    "smollm2-360m/adamw-sgd": ("smollm2-360m", {**TRAIN, "optimizer": "sgd", "batch": 8, "seq": 2048}),
    "qwen3-0.6b/ckpt": ("qwen3-0.6b", {**TRAIN, "batch": 8, "seq": 2048, "checkpointing": "full"}),
    # added after the first H200 run (not measured yet): caches by kind, peft's adapter dtype and DoRA
    "llama-3.2-1b/static-cache": ("llama-3.2-1b", {"mode": "inference", "dtype": "bf16", "batch": 8, "seq": 1024,
                                                   "new_tokens": 64, "cache": "static", "max_cache_len": 4096}),
    "qwen2.5-0.5b/offloaded-cache": ("qwen2.5-0.5b", {"mode": "inference", "dtype": "bf16", "batch": 16, "seq": 2048,
                                                      "new_tokens": 32, "cache": "offloaded"}),
    "llama-3.2-1b/lora-bf16": ("llama-3.2-1b", {**TRAIN, "method": "lora", "lora_dtype": "bf16", "lora_dropout": 0.05,
                                                "batch": 4, "seq": 2048}),
    "llama-3.2-1b/dora": ("llama-3.2-1b", {**TRAIN, "method": "lora", "dora": True, "batch": 2, "seq": 2048}),
    "bert-base/seq-cls": ("bert-base-uncased", {**TRAIN, "dtype": "fp32", "amp": "bf16", "batch": 32, "seq": 512,
                                                "task": "sequence-classification"}),
    "bert-base/masked-lm": ("bert-base-uncased", {**TRAIN, "dtype": "fp32", "amp": "bf16", "batch": 32, "seq": 512,
                                                  "task": "masked-lm"}),
    "t5-base/seq2seq": ("t5-base", {**TRAIN, "dtype": "fp32", "batch": 8, "seq": 512}),
}



def error_of(figure: int | None, measured: int | None) -> float | None:
    """(figure - measured) / measured, or None when either is missing."""
    if not figure or not measured:
        return None
    return round(figure / measured - 1, 5)


def run_case(name: str, backend: str) -> dict[str, Any]:
    """One case: the trace on ``backend`` and the estimate, as a JSON-ready record."""
    from vramlens.estimator import estimate
    from vramlens.trace import trace

    model, wl = CASES[name]
    rec: dict[str, Any] = {"case": name, "model": model, "workload": wl, "backend": backend}
    t0 = time.perf_counter()
    try:
        e = estimate(model, gpu="H200", **wl)
        rec["estimate_peak_allocated"] = e.breakdown.peak_allocated
        rec["estimate_peak_reserved"] = e.breakdown.peak_reserved
        rec["estimate_components"] = e.breakdown.as_dict()
    except Exception as exc:  # noqa: BLE001 - record and go on
        rec["estimate_error"] = f"{type(exc).__name__}: {exc}"
    try:
        t = trace(model, backend=backend, steps=2, **wl)
        rec["trace_peak_allocated"] = t.peak_allocated
        rec["trace_peak_reserved"] = t.breakdown.peak_reserved
        rec["trace_components"] = t.breakdown.as_dict()
        rec["params"] = t.params
        rec["trainable_params"] = t.trainable_params
        if t.cuda:
            rec["cuda_max_allocated"] = t.cuda.get("max_memory_allocated")
            rec["cuda_max_reserved"] = t.cuda.get("max_memory_reserved")
        del t
    except Exception as exc:  # noqa: BLE001
        rec["trace_error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
    measured = rec.get("cuda_max_allocated") or rec.get("trace_peak_allocated")
    rec["estimate_vs_measured"] = error_of(rec.get("estimate_peak_allocated"), measured)
    if rec.get("cuda_max_allocated"):
        rec["recorder_vs_cuda"] = error_of(rec.get("trace_peak_allocated"), rec["cuda_max_allocated"])
        rec["estimate_reserved_vs_cuda"] = error_of(rec.get("estimate_peak_reserved"), rec.get("cuda_max_reserved"))
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "validation" / "stack-gpu.json"))
    ap.add_argument("--only", action="append", choices=sorted(CASES), help="run only these cases")
    ap.add_argument("--backend", choices=("cuda", "fake"), default="cuda")
    ap.add_argument("--budget", type=float, default=240.0, help="stop starting new cases after this many seconds")
    args = ap.parse_args(argv)
    if args.backend == "cuda":
        reason = cuda_unavailable_reason()
        if reason:
            print(f"skipped: {reason}; nothing written")
            return 0
    import torch

    out: dict[str, Any] = {"backend": args.backend, "torch": torch.__version__, "python": platform.python_version(),
                           "cases": []}
    if args.backend == "cuda":
        import transformers

        out.update(device=torch.cuda.get_device_name(0), cuda=torch.version.cuda,
                   transformers=transformers.__version__)
    start = time.perf_counter()
    for name in args.only or list(CASES):
        if time.perf_counter() - start > args.budget:
            out["cases"].append({"case": name, "skipped": f"over the {args.budget:.0f} s budget"})
            continue
        rec = run_case(name, args.backend)
        out["cases"].append(rec)
        print(json.dumps({k: rec.get(k) for k in ("case", "estimate_vs_measured", "recorder_vs_cuda",
                                                   "trace_error", "estimate_error", "seconds")}), flush=True)
        gc.collect()
        if args.backend == "cuda":
            torch.cuda.empty_cache()
        # write after every case: a run stopped at its time limit keeps what it measured
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
