"""The GPU validation script: its comparison logic on CPU, the CUDA part only where CUDA exists."""

import json
import pickle

import pytest

from script_module import load_script
from vramlens.hardware.runtime import LAZY_CONTEXT_CUDA_12_BYTES, LAZY_MODULES_TRAINING_BYTES

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def script():
    return load_script("gpu_allocator_validate")


def recorded_run():
    """A 30 MiB tensor allocated, freed, then a 10 MiB one: one 30 MiB segment, split."""
    A = 0x7F00_0000_0000
    history = [
        {"action": "segment_alloc", "addr": A, "size": 30 * MiB, "stream": 0, "frames": []},
        {"action": "alloc", "addr": A, "size": 30 * MiB, "stream": 0, "frames": []},
        {"action": "free_requested", "addr": A, "size": 30 * MiB, "stream": 0, "frames": []},
        {"action": "free_completed", "addr": A, "size": 30 * MiB, "stream": 0, "frames": []},
        {"action": "alloc", "addr": A, "size": 10 * MiB, "stream": 0, "frames": []},
    ]
    blocks = [{"address": A, "size": 10 * MiB, "requested_size": 10 * MiB, "state": "active_allocated", "frames": []},
              {"address": A + 10 * MiB, "size": 20 * MiB, "requested_size": 0, "state": "inactive", "frames": []}]
    snap = {"segments": [{"device": 0, "address": A, "total_size": 30 * MiB, "stream": 0, "segment_type": "large",
                          "segment_pool_id": (0, 0), "allocated_size": 10 * MiB, "active_size": 10 * MiB,
                          "requested_size": 10 * MiB, "is_expandable": False, "frames": [], "blocks": blocks}],
            "device_traces": [history], "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None}}
    stats = {"reserved_bytes.all.peak": 30 * MiB, "reserved_bytes.all.current": 30 * MiB,
             "allocated_bytes.all.peak": 30 * MiB}
    meta = {"device_used_bytes": 30 * MiB + 779 * MiB, "device_total_bytes": 150_754_820_096, "gpu": "NVIDIA H200",
            "cuda": "12.8", "module_loading": "LAZY", "training": True, "torch": "2.8.0"}
    return pickle.dumps(snap), stats, meta


def test_compare(script):
    snap, stats, meta = recorded_run()
    r = script.compare(snap, stats, meta)
    assert (r["simulated_peak_reserved_bytes"], r["recorded_peak_reserved_bytes"], r["reserved_error"]) == (
        30 * MiB, 30 * MiB, 0.0)
    assert r["simulated_peak_allocated_bytes"] == 30 * MiB and r["reserved_ok"]
    # predicted nvidia-smi figure: reserved 30 MiB + the lazy CUDA 12 context (400 MiB) + the kernel
    # images a training step loads
    assert r["predicted_device_used_bytes"] == 30 * MiB + LAZY_CONTEXT_CUDA_12_BYTES + LAZY_MODULES_TRAINING_BYTES
    assert r["total_error"] == pytest.approx((789 - 809) / 809)
    assert r["total_ok"]
    s = script.summarize({"a": r, "b": {"error": ["boom"]}})
    assert (s["workloads"], s["compared"], s["all_ok"]) == (2, 1, True)


def test_without_cuda_it_skips_and_writes_nothing(script, tmp_path, capsys):
    reason = script.cuda_unavailable_reason()
    if reason is None:
        pytest.skip("CUDA is available here: the real run is test_real_gpu_run")
    out = tmp_path / "allocator-gpu.json"
    assert script.main(["--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("skipped: ")
    assert not out.exists()


@pytest.mark.gpu
def test_real_gpu_run(script, tmp_path):
    if script.cuda_unavailable_reason():
        pytest.skip(f"needs CUDA: {script.cuda_unavailable_reason()}")
    out = tmp_path / "allocator-gpu.json"
    assert script.main(["--out", str(out), "--only", "transformer-train-bf16"]) == 0
    summary = json.loads(out.read_text())["summary"]
    assert summary["compared"] == 1
