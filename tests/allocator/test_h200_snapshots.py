"""Real CUDA snapshots, replayed on CPU: the allocator simulator against an H200's own counters.

validation/allocator-snapshots.tar.gz holds what scripts/gpu_allocator_validate.py recorded on an
NVIDIA H200 (torch 2.11+cu130): per workload, the memory history snapshot, memory_stats() and the
device's used memory. Replaying each history through ``vramlens.allocator.simulate`` must give
the peak reservation the real allocator reported (the script's 3% target; it was exact), and the
peak allocation it counted.
"""

import importlib.util
import json
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "validation" / "allocator-snapshots.tar.gz"
WORKLOADS = ("transformer-infer-varying-batch", "transformer-train-bf16", "transformer-train-expandable",
             "transformer-train-fp32", "transformer-train-max-split")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("h200")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(out, filter="data")
    spec = importlib.util.spec_from_file_location("gpu_allocator_validate", ROOT / "scripts" / "gpu_allocator_validate.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return out, script


@pytest.mark.parametrize("name", WORKLOADS)
def test_replayed_h200_history_reserves_what_the_allocator_reserved(runs, name):
    root, script = runs
    d = root / name
    conf, _ = script.WORKLOADS[name]
    stats = json.loads((d / "memory_stats.json").read_text())
    r = script.compare((d / "snapshot.pickle").read_bytes(), stats, json.loads((d / "meta.json").read_text()),
                       alloc_conf=conf)
    assert r["history_entries"] > 1000
    assert abs(r["reserved_error"]) <= script.RESERVED_TARGET, r
    assert r["simulated_peak_allocated_bytes"] == r["recorded_peak_allocated_bytes"]
    assert r["simulated_final_reserved_bytes"] == r["recorded_final_reserved_bytes"]
