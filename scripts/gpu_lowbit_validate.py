"""Measure torchao's low-bit optimizers on a CUDA GPU: state bytes and the step's transient peak.

For each of torchao.optim.AdamW8bit, AdamW4bit and AdamWFp8 (compiled, as torchao runs them, and
under ``torch.compiler.set_stance("force_eager")``, as vramlens' tracer runs them), one bf16
parameter of ROWS x COLS with a gradient:

* state_bytes: ``memory_allocated`` after the first step minus before it (codes, scales, qmaps);
* step_transient_bytes: ``max_memory_allocated`` during the second step minus ``memory_allocated``
  before it (what the step allocates and frees again);

and CPUOffloadOptimizer(torch.optim.AdamW, fused=True) over the same parameter and a small one
(below its 4,096-element ``minimal_size``): the GPU bytes it adds.

These are measurements to compare the estimator with (tests/estimator/test_lowbit_optimizers.py
reads the JSON); nothing in vramlens is fitted to them. Without CUDA or torchao it exits 0 with
"skipped: ...".

    python scripts/gpu_lowbit_validate.py --out validation/lowbit-gpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROWS, COLS = 8192, 8192  # 67,108,864 elements: a multiple of every block size (128, 256)


def _measure(make, steps_eager: bool) -> dict:
    import torch

    torch.cuda.empty_cache()
    p = torch.nn.Parameter(torch.randn(ROWS, COLS, device="cuda", dtype=torch.bfloat16))
    p.grad = torch.randn_like(p)
    opt = make([p])
    stance = torch.compiler.set_stance("force_eager") if steps_eager else None
    if stance is not None:
        stance.__enter__()
    try:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        opt.step()
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        after1 = torch.cuda.memory_allocated()
        peak1 = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        opt.step()
        torch.cuda.synchronize()
        after2 = torch.cuda.memory_allocated()
        peak2 = torch.cuda.max_memory_allocated()
    finally:
        if stance is not None:
            stance.__exit__(None, None, None)
    out = {
        "numel": p.numel(), "param_dtype": "bf16", "state_bytes": after1 - before,
        "first_step_transient_bytes": peak1 - after1, "step_transient_bytes": peak2 - after1,
        "steady": after2 == after1, "first_step_seconds": round(first_s, 2),
    }
    del opt, p
    return out


def _offload() -> dict:
    import torch
    from torchao.optim import CPUOffloadOptimizer

    torch.cuda.empty_cache()
    p = torch.nn.Parameter(torch.randn(ROWS, COLS, device="cuda", dtype=torch.bfloat16))
    s = torch.nn.Parameter(torch.randn(1000, device="cuda", dtype=torch.bfloat16))
    torch.cuda.synchronize()
    before_opt = torch.cuda.memory_allocated()
    opt = CPUOffloadOptimizer([p, s], torch.optim.AdamW, fused=True)
    torch.cuda.synchronize()
    after_init = torch.cuda.memory_allocated()
    p.grad = torch.randn_like(p)
    s.grad = torch.randn_like(s)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    opt.step()
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated()
    peak = torch.cuda.max_memory_allocated()
    return {"numel": p.numel(), "small_numel": s.numel(), "init_gpu_bytes": after_init - before_opt,
            "step_gpu_bytes_kept": after - before, "step_transient_bytes": peak - after}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA device", file=sys.stderr)
        return 0
    try:
        import torchao
        from torchao.optim import AdamW4bit, AdamW8bit, AdamWFp8
    except ImportError as e:
        print(f"skipped: torchao cannot be imported ({e})", file=sys.stderr)
        return 0
    result: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "torchao": torchao.__version__, "shape": [ROWS, COLS], "runs": {}}

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")

    cases = [("adamw-8bit-torchao", AdamW8bit), ("adamw-4bit-torchao", AdamW4bit),
             ("adamw-fp8-torchao", AdamWFp8)]
    for eager in (False, True):
        for name, cls in cases:
            key = f"{name}{'-eager' if eager else ''}"
            try:
                result["runs"][key] = _measure(lambda ps, c=cls: c(ps, lr=1e-4), eager)
            except Exception as e:  # noqa: BLE001 - one optimizer's failure must not lose the others
                result["runs"][key] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(key, result["runs"][key], flush=True)
            save()
        if not eager:
            try:
                result["runs"]["adamw-cpu-offload-torchao"] = _offload()
            except Exception as e:  # noqa: BLE001
                result["runs"]["adamw-cpu-offload-torchao"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print("offload", result["runs"]["adamw-cpu-offload-torchao"], flush=True)
            save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
