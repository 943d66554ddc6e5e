"""--compile-scope on the command line: the JSON workload carries it, the estimate counts per-block graphs (k and v at
the KV heads, eager head), and fit plans written for torchtune compile per block."""

import json

from cli_run import run_cli
from vramlens.web.page import KNOBS, SHOW_WHEN

BASE = ["estimate", "llama-3.2-3b", "--mode", "train", "--dtype", "bf16", "--seq", "4096", "--compile", "--json"]


def test_flag_reaches_the_workload_and_the_figure(capsys):
    code, out, _ = run_cli(capsys, [*BASE, "--compile-scope", "blocks"])
    assert code == 0
    blocks = json.loads(out)
    _, out, _ = run_cli(capsys, BASE)
    model = json.loads(out)
    assert (blocks["workload"]["compile_scope"], model["workload"]["compile_scope"]) == ("blocks", "model")
    # the whole-model graph keeps expanded k and v and the bf16 logits; per block, the eager head keeps more
    assert blocks["components"]["activations"] != model["components"]["activations"]
    assert any("--compile-scope blocks" in n for n in blocks["notes"])
    assert "compile_scope" in {k[0] for k in KNOBS} and SHOW_WHEN["compile_scope"] == "mode=train;compile=true"


def test_a_bad_scope_is_one_line(capsys):
    code, _, err = run_cli(capsys, [*BASE, "--compile-scope", "layers"])
    assert code == 2
    assert err.strip().splitlines() == [
        "error: argument --compile-scope: invalid choice: 'layers' (choose from 'model', 'blocks', 'blocks+loss') "
        "(see vramlens estimate --help)"]


def test_fit_for_torchtune_compiles_per_block(capsys):
    code, out, _ = run_cli(capsys, ["fit", "llama-3.2-3b", "--mode", "train", "--method", "lora", "--gpu", "80GB",
                                    "--compile", "--emit", "torchtune"])
    assert code == 0 and out.startswith("tune run lora_finetune_single_device")
    assert "compile=True" in out.split()
