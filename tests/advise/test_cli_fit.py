"""`vramlens fit`: --json plans reproduce with `vramlens estimate`, the table, --emit, errors."""

from __future__ import annotations

import json

import pytest

from vramlens.advise.plan import settings_argv
from vramlens.cli.main import main

MODEL = "llama-2-7b"


def _run(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def catalog():
    from vramlens.models import load_model

    return load_model(MODEL)


def test_json_plans_reproduce_with_estimate(capsys, catalog):
    rc, out, _ = _run(capsys, ["fit", MODEL, "--mode", "train", "--batch", "8", "--seq", "1024",
                               "--gpu", "RTX-4090", "--top", "3", "--json", "--max-batch"])
    assert rc == 0
    d = json.loads(out)
    assert 1 <= len(d["plans"]) <= 3
    assert d["max_batch"]["value"] >= 1
    for p in d["plans"]:
        assert p["fits"] is True
        assert set(p) >= {"settings", "device_total_bytes", "components", "host_bytes", "step_time_s", "tradeoffs"}
        rc, out, _ = _run(capsys, ["estimate", MODEL, *settings_argv(p["settings"]), "--gpu", "RTX-4090", "--json"])
        assert rc == 0
        e = json.loads(out)
        assert e["device_total_bytes"] == p["device_total_bytes"]
        assert e["components"] == p["components"]
        assert e["host_bytes"] == p["host_bytes"]
        assert e["fits"] is True


def test_table_and_exit_code(capsys, catalog):
    argv = ["fit", MODEL, "--seq", "2048", "--new-tokens", "128", "--gpu", "L4", "--top", "2"]
    rc, out, _ = _run(capsys, argv + ["--optimize", "speed"])
    assert rc == 0
    lines = out.splitlines()
    assert "valid plans fit 1 x L4 with 10% headroom; best:" in lines[0]
    # the L4's CUDA total, 23,570,219,008 B = 21.95 GiB (nvidia-smi's 22.49 GiB less the driver's reserve)
    assert "; fits (L4): " in lines[0] and " usable (21.95 GiB less 10% headroom), " in lines[0]
    assert "tok/s" in out and "flags: --mode inference" in out
    assert ("components are each their own peak during the step (they peak in different phases), so they do not "
            "add up to the total") in lines


def test_a_workload_that_fits_is_the_answer(capsys, catalog):
    """Issue 13: fit proposed changes when nothing needed changing; now 'it fits' is the answer."""
    rc, out, _ = _run(capsys, ["fit", MODEL, "--seq", "2048", "--new-tokens", "128", "--gpu", "L4"])
    assert rc == 0
    lines = out.splitlines()
    # usable = int(0.9 x 23,570,219,008) = 21,213,197,107 B = 19.76 GiB (CUDA's total 21.95 GiB less 10%)
    assert lines[0] == "fits (L4): 14.46 GiB of 19.76 GiB usable (21.95 GiB less 10% headroom), 5.29 GiB to spare"
    assert lines[1] == "nothing to change; ask --optimize speed|memory|cost for faster or smaller plans"
    rc, out, _ = _run(capsys, ["fit", MODEL, "--seq", "2048", "--new-tokens", "128", "--gpu", "L4", "--json"])
    d = json.loads(out)
    assert d["already_fits"] is True and len(d["plans"]) == 1
    assert d["plans"][0]["settings"]["seq"] == 2048 and "quant" not in d["plans"][0]["settings"]


def test_objectives_are_the_advisors():
    from vramlens.advise.search import OBJECTIVES as API
    from vramlens.cli.fit import OBJECTIVES as CLI

    assert CLI == API


def test_emit_choices_are_the_writers():
    from vramlens.advise.emit import KINDS
    from vramlens.cli.fit import EMIT_KINDS

    assert EMIT_KINDS == KINDS


def test_no_fit_exit_code_and_closest(capsys, catalog):
    rc, out, _ = _run(capsys, ["fit", MODEL, "--mode", "train", "--method", "full", "--forbid", "offload",
                               "--gpu", "RTX-3060"])
    assert rc == 1
    assert out.startswith("no plan fits RTX-3060 with 10% headroom")
    assert "closest plan (does not fit):" in out


def test_emit_peft_and_trainer(capsys, catalog):
    rc, out, _ = _run(capsys, ["fit", MODEL, "--mode", "train", "--method", "lora", "--gpu", "24GB", "--emit", "peft"])
    assert rc == 0
    cfg = json.loads(out)
    assert cfg["r"] == 8 and cfg["task_type"] == "CAUSAL_LM"  # peft's default rank, vramlens' too
    rc, out, _ = _run(capsys, ["fit", MODEL, "--mode", "train", "--method", "lora", "--gpu", "24GB",
                               "--emit", "alloc-conf"])
    assert out.strip().startswith("PYTORCH_CUDA_ALLOC_CONF=")


def test_emit_llamacpp_says_what_its_buffers_will_be(capsys, catalog):
    """The llama-server line, and llama.cpp's own accounting of exactly those flags: its KV cache
    holds the plan's tokens (slots x (prompt + new tokens), padded to 256 with flash attention)."""
    from vramlens.advise.emit import llamacpp_settings
    from vramlens.hardware.catalog import get_gpu
    from vramlens.serving import capacity

    argv = ["fit", MODEL, "--mode", "inference", "--batch", "4", "--seq", "1000", "--new-tokens", "200",
            "--gpu", "A100-80GB", "--emit", "llama.cpp"]
    rc, out, _ = _run(capsys, argv)
    command, comment = out.strip().splitlines()
    assert rc == 0 and command.startswith("llama-server -m ") and "--ctx-size 4800 --parallel 4" in command
    assert comment.startswith("# llama.cpp will log") and "CUDA0 model buffer size (MiB)" in comment
    rc, out, _ = _run(capsys, argv + ["--json"])
    cfg = json.loads(out)
    c = capacity(catalog, "llama.cpp", gpu=get_gpu("A100-80GB"), **llamacpp_settings(cfg))
    per_token = 2 * catalog.n_layers * catalog.n_kv_heads * catalog.head_dim * 2  # f16 K and V
    assert c.kv_cache_bytes == per_token * 4864  # 4 x (1000 + 200) = 4800, padded to 4864
    assert f"KV self size (MiB) {c.kv_cache_bytes / 2**20:,}" in comment


def test_contradiction_is_one_line_exit_2(capsys, catalog):
    rc, out, err = _run(capsys, ["fit", MODEL, "--mode", "train", "--method", "full", "--keep", "lora",
                                 "--gpu", "A100-80GB"])
    assert rc == 2
    assert err.strip() == "error: --keep lora contradicts --method full: drop one"


def test_plan_out_of_range(capsys, catalog):
    rc, _, err = _run(capsys, ["fit", MODEL, "--gpu", "H100-SXM-80GB", "--forbid", "quant,kv-quant,attention,tp,amp",
                               "--emit", "device-map", "--plan", "50"])
    assert rc == 2 and "--plan 50: only" in err


def test_a_refused_emit_names_a_plan_that_can_be_written(tmp_path, capsys, catalog):
    """--emit refusing plan 1 points at the first plan shown that the target can write; and the refusal
    comes before the reports (they were written, then exit 2)."""
    html = tmp_path / "plans.html"
    rc, out, err = _run(capsys, ["fit", MODEL, "--gpu", "24GB", "--mode", "train", "--emit", "peft", "--html", str(html)])
    assert (rc, out) == (2, "")
    assert err.startswith("error: --emit peft: the plan trains every parameter (--method full)")
    assert err.rstrip().endswith("; plan 3 can be written: --emit peft --plan 3")
    assert not html.exists()
    rc, out, err = _run(capsys, ["fit", MODEL, "--gpu", "24GB", "--mode", "train", "--emit", "peft", "--plan", "3"])
    assert rc == 0, err
    assert json.loads(out)["r"] == 8  # the plan's LoraConfig
