"""--gqa-expand on the command line: the JSON workload carries it and the estimate counts the copies; fit plans
written for torchtune (whose attention expands GQA keys and values) count them too."""

import json

from cli_run import run_cli
from vramlens.web.page import KNOBS


def test_flag_reaches_the_workload_and_the_figure(capsys):
    base = ["estimate", "llama-3.2-3b", "--mode", "train", "--dtype", "bf16", "--seq", "4096", "--json"]
    code, out, _ = run_cli(capsys, [*base, "--gqa-expand"])
    assert code == 0
    expanded = json.loads(out)
    assert expanded["workload"]["gqa_expand"] is True
    _, out, _ = run_cli(capsys, base)
    plain = json.loads(out)
    assert plain["workload"]["gqa_expand"] is False
    assert expanded["peak_allocated_bytes"] > plain["peak_allocated_bytes"]
    assert "gqa_expand" in {k[0] for k in KNOBS}


def test_fit_for_torchtune_counts_its_expansion(capsys, monkeypatch):
    import vramlens.fallback as fb

    seen = {}
    real = fb.fit

    def spy(*a, **kw):
        seen.update(kw)
        return real(*a, **kw)

    monkeypatch.setattr(fb, "fit", spy)
    code, out, _ = run_cli(capsys, ["fit", "llama-3.2-3b", "--mode", "train", "--method", "lora", "--gpu", "24GB",
                                 "--emit", "torchtune"])
    assert code == 0 and out.startswith("tune run lora_finetune_single_device")
    assert seen["gqa_expand"] is True
    seen.clear()
    run_cli(capsys, ["fit", "llama-3.2-3b", "--mode", "train", "--method", "lora", "--gpu", "24GB", "--emit", "peft"])
    assert seen.get("gqa_expand", False) is False
