"""scripts/gpu_validate.py runs anywhere: without CUDA it skips with a reason."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


#: script, its output file, the stream its skip line goes to, and what that line says
SKIPPING = [("gpu_validate.py", "trace-gpu.json", "stderr", "skipped: no CUDA device"),
            ("gpu_stack_validate.py", "stack-gpu.json", "stdout", "sees no CUDA device"),
            ("gpu_lowbit_validate.py", "lowbit-gpu.json", "stderr", "skipped: no CUDA device")]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: run the scripts themselves")
@pytest.mark.parametrize("script,name,stream,says", SKIPPING)
def test_gpu_scripts_skip_without_cuda(tmp_path, script, name, stream, says):
    out = tmp_path / name
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0
    assert "skipped:" in getattr(p, stream) and says in getattr(p, stream)
    assert not out.exists()


@pytest.mark.slow
def test_stack_script_fake_backend_compares_trace_and_estimate(tmp_path):
    """The same cases through the fake trace: each record holds both figures and their error."""
    import json

    out = tmp_path / "stack-fake.json"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_stack_validate.py"), "--backend", "fake",
                        "--only", "bert-base/seq-cls", "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    (case,) = json.loads(out.read_text())["cases"]
    assert "trace_error" not in case and "estimate_error" not in case
    assert case["trace_peak_allocated"] > case["params"] * 4  # fp32 weights alone
    err = case["estimate_peak_allocated"] / case["trace_peak_allocated"] - 1
    assert case["estimate_vs_measured"] == pytest.approx(err, abs=1e-4)
