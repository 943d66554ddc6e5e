"""Dump the allocation events of a one-block model's training step, for diffing backends.

Used to find where the fake-tensor trace parts from a real CUDA run: the same one-block model
(a catalog config cut to one layer) runs one step under ``--backend`` (fake here, cuda on a
GPU), and every allocation of the forward pass is written as (op, module, bytes, tag, freed in
phase) so two dumps can be diffed line by line.

Run: python scripts/gpu_events_diff.py --model pythia-410m --backend fake --out ev-fake.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def dump(model: str, backend: str, wl: dict) -> dict:
    from vramlens.models.catalog import find_config
    from vramlens.trace import trace

    found = find_config(model)
    assert found is not None, model
    cfg = {**found[1], "_name_or_path": found[0]}
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if key in cfg:
            cfg[key] = 1
    t = trace(cfg, backend=backend, steps=1, **wl)
    freed: dict[int, str] = {}
    for e in t.events:
        if e.action == "free":
            freed[e.storage] = e.phase
    rows = [{"op": e.op, "module": e.module, "bytes": e.nbytes, "tag": e.tag, "phase": e.phase,
             "freed_in": freed.get(e.storage)} for e in t.events if e.action == "alloc"]
    return {"model": model, "backend": backend, "workload": wl, "peak": t.peak_allocated, "cuda": t.cuda,
            "events": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--out", required=True)
    ap.add_argument("--workload", default='{"mode": "train", "dtype": "bf16", "batch": 2, "seq": 256}')
    a = ap.parse_args(argv)
    wl = json.loads(a.workload)
    out = [dump(m, a.backend, wl) for m in a.model]
    Path(a.out).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
