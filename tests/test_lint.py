"""House rules enforced by ruff (pyproject.toml): only vramlens.trace imports torch (TID251)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_passes_including_the_torch_ban():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install 'vramlens[dev]')")
    r = subprocess.run([ruff, "check", "src", "tests", "scripts", "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_ban_catches_a_torch_import_outside_trace(tmp_path):
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install 'vramlens[dev]')")
    bad = ROOT / "src" / "vramlens" / "estimate" / "_lint_probe.py"
    bad.write_text("import torch  # noqa: F401\n")
    try:
        r = subprocess.run([ruff, "check", str(bad)], cwd=ROOT, capture_output=True, text=True)
    finally:
        bad.unlink()
    assert r.returncode != 0 and "TID251" in r.stdout
