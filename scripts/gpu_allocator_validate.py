"""Check the allocator simulator and the runtime model against real CUDA runs.

Where CUDA exists, each workload runs in a fresh process (so the CUDA context is its own) with
``torch.cuda.memory._record_memory_history`` on from before the first allocation; the child
dumps its snapshot, ``memory_stats()`` and the device's used memory (``cudaMemGetInfo``, the
figure nvidia-smi shows). The parent replays each snapshot's history through
``vramlens.allocator.simulate`` and compares:

- peak reserved: simulated vs ``reserved_bytes.all.peak`` (target within 3%);
- device total: replayed reserved at the end + ``runtime_overhead().outside_allocator_bytes``
  vs the used memory measured then (target within 5%).

Results go to ``validation/allocator-gpu.json``. Without CUDA it says why and exits 0.

    python scripts/gpu_allocator_validate.py [--out validation/allocator-gpu.json] [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from vramlens.allocator.replay import trace_to_events  # noqa: E402
from vramlens.allocator.simulator import simulate  # noqa: E402
from vramlens.allocator.snapshot import config_from_settings, safe_loads  # noqa: E402
from vramlens.errors import UnknownGPUError  # noqa: E402
from vramlens.hardware.catalog import generic_gpu, get_gpu  # noqa: E402
from vramlens.hardware.runtime import runtime_overhead  # noqa: E402
from vramlens.trace.common import cuda_unavailable_reason  # noqa: E402

RESERVED_TARGET = 0.03
TOTAL_TARGET = 0.05

#: name -> (PYTORCH_CUDA_ALLOC_CONF, workload kwargs)
WORKLOADS: dict[str, tuple[str, dict]] = {
    "transformer-train-fp32": ("", {"mode": "train", "dtype": "fp32", "batch": 8}),
    "transformer-train-bf16": ("", {"mode": "train", "dtype": "bf16", "batch": 16}),
    "transformer-train-expandable": ("expandable_segments:True", {"mode": "train", "dtype": "bf16", "batch": 16}),
    "transformer-train-max-split": ("max_split_size_mb:128", {"mode": "train", "dtype": "fp32", "batch": 8}),
    "transformer-infer-varying-batch": ("", {"mode": "infer", "dtype": "bf16", "batch": 0}),
}


# ------------------------------------------------------------------------------ child (GPU)
def run_child(name: str, out: Path) -> None:  # pragma: no cover - needs CUDA
    """Run one workload on the GPU and write snapshot.pickle, memory_stats.json, meta.json."""
    import random

    import torch
    from torch import nn

    _, kw = WORKLOADS[name]
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    dev = torch.device("cuda")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[kw["dtype"]]
    d, layers, vocab, seq = 1024, 8, 32_000, 512
    layer = nn.TransformerEncoderLayer(d, 16, 4 * d, dropout=0.1, batch_first=True, norm_first=True)
    body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    model = nn.ModuleDict({"emb": nn.Embedding(vocab, d), "body": body, "head": nn.Linear(d, vocab)}).to(dev, dtype)

    def forward(x):
        return model["head"](model["body"](model["emb"](x)))

    if kw["mode"] == "train":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        for _ in range(3):
            x = torch.randint(0, vocab, (kw["batch"], seq), device=dev)
            loss = nn.functional.cross_entropy(forward(x).float().view(-1, vocab), x.view(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    else:
        rng = random.Random(0)
        with torch.no_grad():
            for _ in range(30):
                forward(torch.randint(0, vocab, (rng.randint(1, 16), rng.choice((128, 256, 384, 512))), device=dev))
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    torch.cuda.memory._dump_snapshot(str(out / "snapshot.pickle"))
    (out / "memory_stats.json").write_text(json.dumps(torch.cuda.memory_stats()))
    props = torch.cuda.get_device_properties(0)
    meta = {"device_used_bytes": total - free, "device_total_bytes": total, "gpu": props.name,
            "compute_capability": [props.major, props.minor], "torch": torch.__version__,
            "cuda": torch.version.cuda, "module_loading": os.environ.get("CUDA_MODULE_LOADING", "LAZY"),
            "training": kw["mode"] == "train"}
    (out / "meta.json").write_text(json.dumps(meta))


# ------------------------------------------------------------------------------ parent (CPU-testable)
def compare(snapshot: bytes, stats: dict, meta: dict, *, alloc_conf: str = "") -> dict:
    """Replay one recorded run and compare it with what was measured.

    Args:
        snapshot: the snapshot pickle's bytes (read with the restricted unpickler).
        stats: torch.cuda.memory_stats() of the run.
        meta: device_used_bytes, device_total_bytes, gpu, cuda, module_loading, training.
        alloc_conf: the PYTORCH_CUDA_ALLOC_CONF the run used (else the snapshot's record).

    Returns:
        A JSON-ready dict with recorded and simulated figures, errors and pass flags.
    """
    snap = safe_loads(snapshot)
    conf = alloc_conf or (config_from_settings(snap.get("allocator_settings")) or None)
    entries = (snap.get("device_traces") or [[]])[0]
    result = simulate(trace_to_events(entries), conf)
    rec_peak = int(stats["reserved_bytes.all.peak"])
    rec_final = int(stats["reserved_bytes.all.current"])
    try:
        gpu = get_gpu(meta.get("gpu", ""))
    except UnknownGPUError:
        gpu = generic_gpu(int(meta.get("device_total_bytes", 0)) or 1, name=meta.get("gpu"))
    rt = runtime_overhead(gpu, training=bool(meta.get("training", True)), cuda_version=meta.get("cuda"),
                          lazy_loading=meta.get("module_loading", "LAZY").upper() == "LAZY")
    predicted_total = result.final_reserved_bytes + rt.outside_allocator_bytes
    measured_total = int(meta["device_used_bytes"])
    reserved_error = result.peak_reserved_bytes / rec_peak - 1 if rec_peak else 0.0
    total_error = predicted_total / measured_total - 1 if measured_total else 0.0
    return {
        "recorded_peak_reserved_bytes": rec_peak,
        "simulated_peak_reserved_bytes": result.peak_reserved_bytes,
        "reserved_error": reserved_error,
        "reserved_ok": abs(reserved_error) <= RESERVED_TARGET,
        "recorded_final_reserved_bytes": rec_final,
        "simulated_final_reserved_bytes": result.final_reserved_bytes,
        "recorded_peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
        "simulated_peak_allocated_bytes": result.peak_allocated_bytes,
        "history_entries": len(entries),
        "measured_device_used_bytes": measured_total,
        "predicted_device_used_bytes": predicted_total,
        "predicted_outside_allocator_bytes": rt.outside_allocator_bytes,
        "measured_outside_allocator_bytes": measured_total - rec_final,
        "total_error": total_error,
        "total_ok": abs(total_error) <= TOTAL_TARGET,
        "gpu": meta.get("gpu"), "torch": meta.get("torch"), "cuda": meta.get("cuda"),
        "alloc_conf": alloc_conf,
    }


def summarize(results: dict) -> dict:
    """Worst errors and overall pass flags over all workloads."""
    done = [r for r in results.values() if "reserved_error" in r]
    return {
        "workloads": len(results),
        "compared": len(done),
        "max_abs_reserved_error": max((abs(r["reserved_error"]) for r in done), default=None),
        "max_abs_total_error": max((abs(r["total_error"]) for r in done), default=None),
        "reserved_target": RESERVED_TARGET,
        "total_target": TOTAL_TARGET,
        "all_ok": bool(done) and all(r["reserved_ok"] and r["total_ok"] for r in done),
    }



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "validation" / "allocator-gpu.json"))
    ap.add_argument("--only", action="append", choices=sorted(WORKLOADS), help="run only these workloads")
    ap.add_argument("--keep", help="copy each workload's snapshot, stats and meta into this folder")
    ap.add_argument("--child", choices=sorted(WORKLOADS), help=argparse.SUPPRESS)
    ap.add_argument("--child-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:  # pragma: no cover - needs CUDA
        run_child(args.child, Path(args.child_dir))
        return 0
    reason = cuda_unavailable_reason()
    if reason:
        print(f"skipped: {reason}; nothing written")
        return 0
    results: dict = {}  # pragma: no cover - needs CUDA
    for name in args.only or sorted(WORKLOADS):  # pragma: no cover
        conf, _ = WORKLOADS[name]
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
            proc = subprocess.run([sys.executable, __file__, "--child", name, "--child-dir", tmp], env=env,
                                  capture_output=True, text=True, timeout=540)
            if proc.returncode != 0:
                results[name] = {"error": proc.stderr.strip().splitlines()[-1:] or ["failed"]}
                continue
            d = Path(tmp)
            if args.keep:
                import shutil

                shutil.copytree(d, Path(args.keep) / name, dirs_exist_ok=True)
            results[name] = compare((d / "snapshot.pickle").read_bytes(),
                                    json.loads((d / "memory_stats.json").read_text()),
                                    json.loads((d / "meta.json").read_text()), alloc_conf=conf)
        print(name, json.dumps({k: results[name].get(k) for k in ("reserved_error", "total_error")}))
    out = {"summary": summarize(results), "workloads": results}  # pragma: no cover
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # pragma: no cover
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")  # pragma: no cover
    print(json.dumps(out["summary"], indent=2))  # pragma: no cover
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
