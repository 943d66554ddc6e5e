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
    """The probe goes into a copy of the layout under tmp_path, with the project's ruff settings: nothing in src/."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install 'vramlens[dev]')")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for package in ("estimator", "trace"):
        (tmp_path / "src" / "vramlens" / package).mkdir(parents=True)
        (tmp_path / "src" / "vramlens" / package / "_lint_probe.py").write_text("import torch  # noqa: F401\n")
    bad = subprocess.run([ruff, "check", "--no-cache", "src/vramlens/estimator/_lint_probe.py"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode != 0 and "TID251" in bad.stdout
    allowed = subprocess.run([ruff, "check", "--no-cache", "src/vramlens/trace/_lint_probe.py"],
                             cwd=tmp_path, capture_output=True, text=True)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
