"""mypy with no arguments (settings in pyproject.toml: strict on the core) is clean, as `.ci/run` requires."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a cold run takes ~40 s on 2 cores (a few seconds with mypy's cache)
def test_mypy_is_clean():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install 'vramlens[dev]')")
    # no arguments: the files and the per-module strictness come from pyproject.toml's [tool.mypy]
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success: no issues found" in r.stdout
