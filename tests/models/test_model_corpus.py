"""Every file of tests/corpus/models (scripts/make_model_corpus.py) is refused in one line, exit 2."""

from __future__ import annotations

import filecmp
import sys
from pathlib import Path

import pytest

from script_module import load_script
from vramlens.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "models"
CASES = sorted([*CORPUS.glob("config/*.json"), *(p for p in CORPUS.glob("safetensors/*") if p.is_dir())])


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))


def test_the_corpus_is_there():
    assert len(CASES) >= 300
    assert any(p.parent.name == "safetensors" for p in CASES)


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_case_is_one_line_exit_2(path, capsys):
    code = main(["estimate", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert len(lines[0]) < 1000, err


def test_the_corpus_is_what_the_script_writes(tmp_path, monkeypatch):
    """The committed corpus is the script's output: rerun it after changing the readers."""
    module = load_script("make_model_corpus")
    monkeypatch.setattr(sys, "argv", ["make_model_corpus.py", "--out", str(tmp_path)])
    assert module.main() == 0
    for sub in ("config", "safetensors"):
        cmp = filecmp.dircmp(tmp_path / sub, CORPUS / sub)
        assert (cmp.left_only, cmp.right_only, cmp.diff_files) == ([], [], []), sub
        for case in cmp.common_dirs:
            inner = cmp.subdirs[case]
            assert (inner.left_only, inner.right_only, inner.diff_files) == ([], [], []), case
