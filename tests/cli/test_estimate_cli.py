import json

import pytest

from vramlens.cli.main import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_json_schema(capsys):
    code, out, err = run(capsys, "estimate", "llama-2-7b", "--mode", "train", "--gpu", "A100-80GB", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["model"]["params"] == 6_738_415_616
    assert d["model"]["trainable_params"] == 6_738_415_616
    assert set(d["components"]) == {"weights", "master_weights", "gradients", "optimizer_states", "activations",
                                     "kv_cache", "temporaries", "comm_buffers", "runtime"}
    assert all(isinstance(v, int) for v in d["components"].values())
    assert d["peak_allocated_bytes"] <= d["peak_reserved_bytes"] <= d["device_total_bytes"]
    assert d["gpu"]["name"] == "A100-80GB"
    # bf16 AdamW: 2 B weights + 2 B grads + 4 B states + 2 B foreach temporary = 10 B/param = 62.8 GiB < 72 GiB
    assert d["fits"] is True
    assert d["fits"] == (d["device_total_bytes"] <= d["gpu"]["usable_bytes"] * 0.9)
    code, out, _ = run(capsys, "estimate", "llama-2-7b", "--mode", "train", "--gpu", "RTX-4090", "--json")
    assert json.loads(out)["fits"] is False


def test_estimate_table(capsys):
    code, out, _ = run(capsys, "estimate", "llama-2-7b", "--gpu", "24GB")
    assert code == 0
    assert "weights" in out and "GiB" in out and "FITS" in out


def test_params_only_prints_assumed_dims(capsys):
    code, out, _ = run(capsys, "estimate", "--params", "7B")
    assert code == 0
    assert "assumed:" in out


@pytest.mark.parametrize("argv, message", [
    (["estimate", "lama-2-7b"], "unknown model 'lama-2-7b'"),
    (["estimate", "llama-2-7b", "--tp", "3", "--gpus", "3"], "tp=3 must divide the 32 attention heads"),
    (["estimate", "llama-2-7b", "--gpu", "A100-90"], "unknown GPU"),
    (["estimate", "llama-2-7b", "--mode", "train", "--method", "lora", "--lora-targets", "c_attn"],
     "lora_targets=c_attn match no linear layer"),
    (["estimate"], "give a MODEL"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_argparse_rejects_unknown_dtype(capsys):
    assert main(["estimate", "llama-2-7b", "--dtype", "fp12"]) == 2
    assert "invalid choice: 'fp12'" in capsys.readouterr().err


def test_missing_config_file_says_no_such_file(capsys):
    code, out, err = run(capsys, "estimate", "./nope/config.json")
    assert code == 2
    assert err.strip() == ("error: no such file or folder: './nope/config.json': pass an existing config.json or "
                           "model folder, a catalog name (vramlens models) or a hub id")


def test_fit_effective_batch_is_for_training(capsys):
    code, out, err = run(capsys, "fit", "gpt2", "--gpu", "T4", "--effective-batch", "8")
    assert code == 2
    assert "effective_batch=8 applies to training" in err


def test_trace_timeline_needs_jsonl_or_csv(capsys, tmp_path):
    code, out, err = run(capsys, "trace", "gpt2", "--timeline", str(tmp_path / "x.txt"))
    assert code == 2
    assert "must end in .jsonl (JSON lines) or .csv" in err


def test_models_lists_the_catalog_as_text_and_json(capsys):
    """`vramlens models` once crashed on every run ('CatalogEntry' has no attribute 'model_type')."""
    from vramlens.models.catalog import list_catalog

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == f"{len(list_catalog())} models"
    assert main(["models", "llama", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all("llama" in (r["id"] + " ".join(r["aliases"])).lower() for r in rows)
    assert {"id", "aliases", "family", "kind", "params"} <= set(rows[0])


def test_checkpointing_takes_torchtitans_modes(capsys):
    got = {}
    for mode in ("none", "selective-op", "every:2", "full"):
        code, out, err = run(capsys, "estimate", "llama-2-7b", "--mode", "train", "--batch", "4", "--seq", "2048",
                             "--checkpointing", mode, "--json")
        assert code == 0, err
        d = json.loads(out)
        assert d["workload"]["checkpointing"] == mode
        got[mode] = d["components"]["activations"]
    assert got["full"] < got["selective-op"] < got["none"] and got["full"] < got["every:2"] < got["none"]


@pytest.mark.parametrize("value, message", [
    ("every:1", "error: checkpointing='every:1' checkpoints every block: use --checkpointing full"),
    ("every", "error: argument --checkpointing: 'every' is not one of: none, full, selective, selective-op, every:N "
              "(see vramlens estimate --help)"),
])
def test_bad_checkpointing_is_one_line(capsys, value, message):
    try:
        code = main(["estimate", "llama-2-7b", "--mode", "train", "--checkpointing", value])
    except SystemExit as e:
        code = e.code
    _, err = capsys.readouterr()
    assert code == 2 and err.strip() == message


def test_fsdp_mixed_precision_is_said_in_the_notes(capsys):
    code, out, err = run(capsys, "estimate", "llama-3-8b", "--mode", "train", "--dtype", "fp32", "--amp", "bf16",
                         "--fsdp", "--gpus", "8", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["components"]["master_weights"] == 0
    assert any("MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)" in n for n in d["notes"])
