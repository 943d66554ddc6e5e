"""Run the cross-check matrix for real on CUDA: torch.cuda's peaks vs the trace and the estimate.

For every row of vramlens.trace.crosscheck (shrunk catalog architectures x workloads) this
runs three things on the same workload:

* the real steps on CUDA tensors (``trace(..., backend="cuda")``), which also reads
  ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``;
* the fake-tensor trace (no GPU involved);
* the analytic estimate (peak_allocated with and without the cuBLAS workspaces).

and writes validation/trace-gpu.json. Without CUDA it says why and writes nothing (exit 0),
so that it can run anywhere; tests/trace/test_gpu_script.py runs it that way.

Run: python scripts/gpu_validate.py [--out validation/trace-gpu.json] [--models gpt2,t5-small]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join("validation", "trace-gpu.json"))
    ap.add_argument("--models", default=None, help="comma-separated subset of the matrix")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_validate: skipped: no CUDA device (torch.cuda.is_available() is False; "
              f"torch {torch.__version__}); nothing written", file=sys.stderr)
        return 0
    from vramlens.estimator import estimate
    from vramlens.models.inventory import spec_from_config
    from vramlens.trace import trace
    from vramlens.trace.crosscheck import (
        ARCHITECTURES,
        ROWS,
        _workspace_bytes,
        skipped,
        tiny_config,
        workload_for,
    )

    models = tuple(m.strip() for m in args.models.split(",")) if args.models else tuple(ARCHITECTURES)
    out = {"device": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
           "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(), "rows": []}
    for name in models:
        for row in ROWS:
            if skipped(name, row):
                continue
            cfg = tiny_config(name)
            wl = workload_for(name, row)
            t0 = time.perf_counter()
            rec: dict = {"model": name, "workload": wl}
            try:
                real = trace(cfg, backend="cuda", steps=2, **wl)
                fake = trace(cfg, steps=2, **wl)
                e = estimate(spec_from_config(cfg, name=cfg["_name_or_path"]), gpu=None, **wl)
                rec.update(
                    cuda_max_allocated=real.cuda.get("max_memory_allocated"),
                    cuda_max_reserved=real.cuda.get("max_memory_reserved"),
                    recorder_on_cuda=real.peak_allocated,
                    fake_trace_peak=fake.peak_allocated,
                    fake_trace_reserved=fake.breakdown.peak_reserved,
                    estimate_peak=e.breakdown.peak_allocated,
                    estimate_peak_tensors=e.breakdown.peak_allocated - _workspace_bytes(e),
                    estimate_reserved=e.breakdown.peak_reserved,
                )
            except Exception as exc:  # noqa: BLE001 - record and go on
                rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["seconds"] = round(time.perf_counter() - t0, 2)
            out["rows"].append(rec)
            print(json.dumps(rec), file=sys.stderr)
            torch.cuda.empty_cache()
            _write(args.out, out)  # after every row: a run stopped at its limit keeps what it measured
    _write(args.out, out)
    return 0


def _write(path: str, doc: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    sys.exit(main())
