"""Every file in tests/corpus/ is refused by the CLI with exit code 2 and one line, nothing on stdout.

The files are written by scripts/make_file_corpus.py; each is bad by construction (a truncation,
a count over its bound, a wrong type, fields that contradict one another). The second test
checks the committed files are what the script writes, so the corpus cannot drift from it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from script_module import load_script
from vramlens.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
FILES = sorted(p for folder in ("gguf", "snapshot") for p in (CORPUS / folder).rglob("*") if p.is_file())


def _script():
    return load_script("make_file_corpus")


def test_corpus_is_large_enough():
    assert len([p for p in FILES if p.parent.name == "gguf"]) >= 150
    assert len([p for p in FILES if p.parent.name == "snapshot"]) >= 150


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_bad_file_is_one_line_exit_2(path, capsys):
    argv = ["place", str(path), "--gpu", "24GB"] if path.suffix == ".gguf" else ["snapshot", str(path)]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(path) in lines[0]  # the message names the file


def test_committed_corpus_is_what_the_script_writes(tmp_path):
    n = _script().write(tmp_path)
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert n == len(written) == len(FILES)
    assert written == [p.relative_to(CORPUS) for p in FILES]
    assert all((tmp_path / rel).read_bytes() == (CORPUS / rel).read_bytes() for rel in written)
