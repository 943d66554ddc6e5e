"""--fp8 on the command line: the JSON workload carries it; inference refuses it with one line."""

import json

from cli_run import run_cli
from vramlens.web.page import KNOBS, SHOW_WHEN


def test_flag_reaches_the_workload(capsys):
    code, out, _ = run_cli(capsys, ["estimate", "llama-3-8b", "--mode", "train", "--dtype", "bf16", "--fp8", "--json"])
    assert code == 0
    d = json.loads(out)
    assert d["workload"]["fp8"] is True
    assert any("Float8Linear" in n for n in d["notes"])


def test_inference_refuses_it_in_one_line(capsys):
    code, _, err = run_cli(capsys, ["estimate", "llama-3-8b", "--mode", "inference", "--fp8"])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "fp8" in lines[0]


def test_the_page_has_a_knob_for_training():
    assert any(k[0] == "fp8" for k in KNOBS)
    assert SHOW_WHEN["fp8"] == "mode=train;method=full"
