"""The bad-command-line corpus: every value-taking flag of every command, fed values of the wrong kind,
out of range or absurd (tests/corpus/cli_bad_args.json, made by scripts/make_cli_corpus.py from the
parser itself), ends with exit code 2, one line on stderr that names the flag, and nothing on stdout.

A case that hangs fails after ``CASE_TIMEOUT_S`` instead of stalling the suite (SIGALRM).
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from script_module import load_script
from vramlens.cli.main import main

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "cli_bad_args.json"
CASES: list[list[str]] = json.loads(CORPUS.read_text(encoding="utf-8"))
CASE_TIMEOUT_S = 60


def _id(argv: list[str]) -> str:
    text = " ".join(a if len(a) <= 24 else f"{a[:12]}...({len(a)})" for a in argv)
    return re.sub(r"[^\x21-\x7e]", "?", text)


def test_corpus_is_large_and_covers_every_command():
    assert len(CASES) >= 1000
    assert {argv[0] for argv in CASES} >= {"estimate", "fit", "place", "trace", "snapshot", "serve", "validate"}


@pytest.fixture
def alarm():
    def expire(signum, frame):
        raise TimeoutError(f"a bad input ran for more than {CASE_TIMEOUT_S} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(CASE_TIMEOUT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("argv", CASES, ids=[_id(a) for a in CASES])
def test_bad_command_line_is_one_line_exit_2(argv, capsys, alarm):
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, (argv, out[-300:], err[-300:])
    assert out == ""
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-500:]
    flag = next((a for a in reversed(argv) if a.startswith("--")), None)
    if flag is not None:  # the line names what was wrong: the flag, or the field it sets
        field = flag.removeprefix("--").replace("-", "_")
        named = (flag, field, flag.removeprefix("--"), "host RAM", "bandwidth")
        assert any(n.lower() in lines[0].lower() for n in named), (flag, lines[0])
    assert len(lines[0]) < 600  # a 5,000-digit value is shown shortened


def test_corpus_is_the_parsers_own():
    """The file is what scripts/make_cli_corpus.py makes from today's parser: a new flag, or a flag whose kind
    changed, gets its bad inputs (run the script when this fails)."""
    assert load_script("make_cli_corpus").cases() == CASES
