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


def test_recipe_flag_implies_fp8(capsys):
    code, out, _ = run_cli(capsys, ["estimate", "llama-3-8b", "--mode", "train", "--dtype", "bf16", "--fp8-recipe",
                                    "rowwise_with_gw_hp", "--json"])
    assert code == 0
    d = json.loads(out)
    assert d["workload"]["fp8"] is True and d["workload"]["fp8_recipe"] == "rowwise_with_gw_hp"
    assert any("rowwise scaling, grad_weight in bf16" in n for n in d["notes"])


def test_recipe_under_tp_is_refused_in_one_line(capsys):
    code, _, err = run_cli(capsys, ["estimate", "llama-3-8b", "--mode", "train", "--dtype", "bf16", "--fp8-recipe",
                                    "rowwise", "--tp", "2", "--gpus", "2"])
    assert code == 2
    assert err.strip() == ("error: fp8_recipe=rowwise with tp=2 is not modelled (torchao's float8 tensor-parallel "
                           "styles are tensorwise): use --fp8-recipe tensorwise, or --tp 1")


def test_the_page_has_a_recipe_knob():
    assert any(k[0] == "fp8_recipe" for k in KNOBS)
    assert SHOW_WHEN["fp8_recipe"] == "mode=train;method=full;fp8=true"
