"""vramlens validate capacity: the published cases load, and each figure's error is predicted / logged - 1."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vramlens.errors import InputError
from vramlens.serving.validation import run_cases

CASES = Path(__file__).resolve().parents[2] / "validation" / "capacity-cases.json"


def test_every_case_names_its_source_quote_version_and_settings():
    cases = json.loads(CASES.read_text())
    assert len(cases) >= 4
    for c in cases:
        assert c["source"].startswith("https://") and c["quote"] and c["engine_version"] and c["settings"] is not None


def test_weights_within_one_percent_on_every_case_that_starts():
    for r in run_cases(json.loads(CASES.read_text())):
        for c in r.checks:
            if c.key == "weights_gib" and c.error is not None:
                assert abs(c.error) < 0.01, (r.id, c)


def test_error_is_predicted_over_logged():
    case = {"id": "t", "engine": "vllm", "engine_version": "x", "source": "https://x", "quote": "q",
            "model": "llama-2-7b", "gpu": "A100-80GB", "settings": {}, "logged": {"weights_gib": 10.0}}
    (r,) = run_cases([case])
    # llama-2-7b in fp16: 6,738,415,616 params x 2 B = 12.55 GiB
    assert r.checks[0].predicted == pytest.approx(12.55, abs=0.01)
    assert r.checks[0].error == pytest.approx(r.checks[0].predicted / 10.0 - 1)


def test_a_refusal_is_reported_not_compared():
    cases = [c for c in json.loads(CASES.read_text()) if c["id"] == "vllm-llama3.1-8b-rtx3090-29k"]
    (r,) = run_cases(cases)
    assert r.refusal.startswith("The model's max seq len (29000) is larger than")
    assert all(c.predicted is None and c.error is None for c in r.checks)


def test_bad_cases_are_all_named():
    with pytest.raises(InputError) as e:
        run_cases([{"id": "a", "logged": {"nope": 1}}])
    assert "case 'a': missing 'engine'" in str(e.value) and "logged figure 'nope' is not one of" in str(e.value)


def test_cli_prints_every_case(tmp_path):
    out = subprocess.run([sys.executable, "-m", "vramlens", "validate", "capacity", "--json"], capture_output=True,
                         text=True, check=True).stdout
    rows = json.loads(out)
    assert [r["id"] for r in rows] == [c["id"] for c in json.loads(CASES.read_text())]
