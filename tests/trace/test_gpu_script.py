"""scripts/gpu_validate.py runs anywhere: without CUDA it skips with a reason."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: run scripts/gpu_validate.py itself")
def test_gpu_script_skips_without_cuda(tmp_path):
    out = tmp_path / "trace-gpu.json"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_validate.py"), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0
    assert "skipped: no CUDA device" in p.stderr
    assert not out.exists()
