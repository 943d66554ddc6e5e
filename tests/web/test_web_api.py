"""The JSON API: the same objects as the CLI's --json, clean errors, and nothing unsafe."""

from __future__ import annotations

import json

import pytest
from web_helpers import TINY_LLAMA, needs_model_loader

from vramlens.cli.main import main

pytest.importorskip("fastapi", reason="the web app needs the [web] extra (fastapi)")
from vramlens.web.app import MAX_BODY_BYTES  # noqa: E402  (after the skip: the module imports fastapi)

FLAGS = {"model": "llama-2-7b", "mode": "train", "batch": 4, "seq": 1024, "gpu": "A100-80GB",
         "checkpointing": "full", "grad_accum": 2, "method": "lora", "lora_rank": 8}


def cli_json(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_get_estimate_equals_cli_json(client, capsys):
    needs_model_loader()
    argv = ["estimate", FLAGS["model"], "--json"]
    for k, v in FLAGS.items():
        if k != "model":
            argv += [f"--{k.replace('_', '-')}", str(v)]
    r = client.get("/api/estimate", params=FLAGS)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json(capsys, argv)


def test_post_pasted_config_equals_cli_on_the_same_file(client, capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_LLAMA))
    settings = {"mode": "train", "batch": 3, "seq": 256, "gpu": "24GB", "optimizer": "adamw-8bit"}
    r = client.post("/api/estimate", json={"config": TINY_LLAMA, **settings})
    assert r.status_code == 200, r.text
    api = r.json()
    if hasattr(__import__("vramlens.models", fromlist=["x"]), "load_model"):
        cli = cli_json(capsys, ["estimate", str(path), "--json", "--mode", "train", "--batch", "3", "--seq", "256",
                                "--gpu", "24GB", "--optimizer", "adamw-8bit"])
        # the name and source say where the config came from; every number is the same
        for k in ("name", "source"):
            api["model"].pop(k), cli["model"].pop(k)
        assert api == cli
    # the pasted config as text gives the same answer
    r2 = client.post("/api/estimate", json={"config": json.dumps(TINY_LLAMA), **settings})
    assert r2.json()["components"] == api["components"]
    assert api["workload"]["batch"] == 3 and api["gpu"]["name"]


def test_batch_changes_the_total(client):
    a = client.post("/api/estimate", json={"config": TINY_LLAMA, "mode": "train", "batch": 1}).json()
    b = client.post("/api/estimate", json={"config": TINY_LLAMA, "mode": "train", "batch": 8}).json()
    assert b["components"]["activations"] > a["components"]["activations"]
    assert b["device_total_bytes"] > a["device_total_bytes"]


@pytest.mark.parametrize("body, message", [
    ({"config": "{bad"}, "the pasted config is not valid JSON (line 1, column 2: Expecting property name enclosed "
                         "in double quotes)"),
    ({"config": "[1, 2]"}, "the pasted config must be a JSON object (a config.json), not list"),
    ({"config": "[" * 100_000}, "the pasted config: it nests 100,000 levels deep, over the limit of 64; check the config"),
    ({"config": dict(TINY_LLAMA, num_hidden_layers=10**9)},
     "num_hidden_layers=1000000000 in the pasted config is larger than 4096: no such model exists; check the config"),
    ({"config": TINY_LLAMA, "mode": "fly"}, "mode='fly' is not one of: inference, train"),
    ({"config": TINY_LLAMA, "batch": "many"}, "batch: Input should be a valid integer, unable to parse string as an integer"),
    ({"config": TINY_LLAMA, "trust_remote_code": True}, "trust_remote_code: Extra inputs are not permitted"),
])
def test_bad_pasted_config_is_an_inline_error(client, body, message):
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 422
    assert r.json() == {"error": message}
    assert client.get("/api/gpus").status_code == 200  # still up


def test_model_problem_from_the_estimator_is_422(client):
    r = client.post("/api/estimate", json={"config": TINY_LLAMA, "tp": 3, "gpus": 3})
    assert r.status_code == 422
    assert r.json()["error"].startswith("tp=3 must divide the 8 attention heads")


@pytest.mark.parametrize("model", ["/etc/passwd", "../secrets/config.json", "pyproject.toml", "src",
                                   "config.json", "a/b/c", "~/x"])
def test_model_must_not_name_a_file(client, model):
    r = client.get("/api/estimate", params={"model": model})
    assert r.status_code == 422
    assert r.json() == {"error": f"model={model!r} is not a catalog name or hub id: the web app reads no local "
                                 "files; paste the config.json instead"}


def test_body_over_the_limit_is_413(client):
    r = client.post("/api/estimate", content=b" " * (MAX_BODY_BYTES + 1), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json() == {"error": "request body over 256 KiB: paste a config.json, not a checkpoint"}


def test_streamed_body_over_the_limit_is_413(client):
    def chunks():
        for _ in range(40):
            yield b" " * 8192

    r = client.post("/api/estimate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_unknown_parameter_is_refused(client):
    r = client.get("/api/estimate", params={"params": "7B", "bacth": 4})
    assert r.status_code == 422
    assert r.json() == {"error": "bacth: Extra inputs are not permitted"}


def test_gpus_and_models(client):
    gpus = client.get("/api/gpus").json()
    assert any(g["name"] == "A100-80GB" or "a100-80gb" in g["aliases"] for g in gpus)
    assert all(g["usable_bytes"] <= g["memory_bytes"] for g in gpus)
    models = client.get("/api/models")
    assert models.status_code == 200 and isinstance(models.json(), list)


def test_svg_endpoint(client):
    import xml.etree.ElementTree as ET

    r = client.post("/api/estimate.svg", json={"config": TINY_LLAMA, "gpu": "24GB"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    ET.fromstring(r.text)


def test_openapi_documents_the_flags(client):
    spec = client.get("/openapi.json").json()
    names = {p["name"] for p in spec["paths"]["/api/estimate"]["get"]["parameters"]}
    assert {"model", "mode", "batch", "seq", "new_tokens", "grad_accum", "lora_rank", "kv_dtype", "gpu"} <= names
    assert {"/api/models", "/api/gpus", "/api/fit"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200


def test_fit_equals_cli_fit_json(client, capsys):
    from vramlens.web.app import advisor

    fit = advisor()
    if fit is None:
        r = client.get("/api/fit", params={"params": "7B"})
        assert r.status_code == 501
        assert r.json() == {"error": "the advisor (vramlens.advise.fit) is not available in this version"}
        return
    needs_model_loader()
    r = client.get("/api/fit", params={"model": "llama-2-7b", "mode": "train", "gpu": "24GB", "top": 3})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d == cli_json(capsys, ["fit", "llama-2-7b", "--mode", "train", "--gpu", "24GB", "--top", "3", "--json"])
    assert 1 <= len(d["plans"]) <= 3 and all("components" in p for p in d["plans"])


def test_fit_errors_are_422(client):
    from vramlens.web.app import advisor

    assert advisor() is not None
    r = client.get("/api/fit", params={"params": "7B", "mode": "fly", "gpu": "24GB"})
    assert r.status_code == 422 and r.json() == {"error": "mode='fly' is not one of: inference, train"}


def test_api_takes_every_workload_flag():
    """The API's settings are generated from the Workload, so every CLI workload flag is accepted."""
    from dataclasses import fields

    from vramlens.web.app import Settings
    from vramlens.workload import Workload

    assert {f.name for f in fields(Workload)} <= set(Settings.model_fields)


def test_fit_of_a_pasted_config(client):
    from web_helpers import TINY_LLAMA

    r = client.post("/api/fit", json={"config": TINY_LLAMA, "mode": "train", "gpu": "1GB", "batch": 4, "top": 3})
    assert r.status_code == 200
    d = r.json()
    assert 1 <= len(d["plans"]) <= 3 and all(p["fits"] for p in d["plans"])


def test_compare_is_the_estimate_of_each_dtype(client):
    from vramlens.estimator import estimate

    r = client.get("/api/compare", params={"model": "llama-2-7b", "gpu": "24GB", "batch": 2})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["dtypes"] == ["fp32", "bf16", "int8", "int4"] and [x["mode"] for x in d["rows"]] == ["inference", "train"]
    inf, train = (row["cells"] for row in d["rows"])
    assert inf["int8"]["device_total_bytes"] == estimate("llama-2-7b", gpu="24GB", batch=2, quant="int8").to_dict()["device_total_bytes"]
    assert train["int4"]["device_total_bytes"] == \
        estimate("llama-2-7b", gpu="24GB", batch=2, mode="train", method="qlora").to_dict()["device_total_bytes"]
    # fp32 > bf16 > int8 > int4 at inference: weights shrink with the dtype
    sizes = [inf[k]["device_total_bytes"] for k in d["dtypes"]]
    assert sizes == sorted(sizes, reverse=True)


def test_compare_of_a_training_workload_drops_zero_at_inference(client):
    r = client.get("/api/compare", params={"model": "llama-2-7b", "mode": "train", "zero": 2, "gpus": 2})
    assert r.status_code == 200, r.text
    assert all("error" not in c for row in r.json()["rows"] for c in row["cells"].values())


def test_a_cell_that_cannot_be_made_says_why(client):
    # gpt2 has no q_proj: the LoRA columns of training name the fix, the others are figures
    d = client.get("/api/compare", params={"model": "gpt2"}).json()
    train = d["rows"][1]["cells"]
    assert train["int8"]["error"] == ("lora_targets=q_proj,v_proj match no linear layer of openai-community/gpt2: "
                                      "choose from c_attn, c_fc, c_proj or all-linear (q_proj, k_proj and v_proj "
                                      "name the parts of its fused q/k/v linear under --fused-qkv, LitGPT's "
                                      "LoRAQKVLinear)")
    assert train["bf16"]["device_total_bytes"] > 0


def test_gpu_matrix_is_every_catalog_gpu_smallest_first(client):
    from vramlens.estimator import estimate
    from vramlens.hardware.catalog import list_gpus

    d = client.get("/api/gpu-matrix", params={"params": "7B", "mode": "train", "method": "lora"}).json()
    names = [g["name"] for g in d["gpus"]]
    assert sorted(names) == sorted(g.name for g in list_gpus())
    usable = [g["usable_bytes"] for g in d["gpus"]]
    assert usable == sorted(usable)
    for g in d["gpus"][:: max(1, len(names) // 5)]:
        want = estimate(params="7B", mode="train", method="lora", gpu=g["name"]).to_dict()
        assert (g["fits"], g["device_total_bytes"]) == (want["fits"], want["device_total_bytes"])


def test_model_card_of_a_size_names_what_it_assumed(client):
    d = client.get("/api/model", params={"params": "7B"}).json()
    assert d["source"] == "generic" and d["context_length"] == 4096 and "hidden_size=4096" in d["assumed"]
    assert d["params"] == client.get("/api/estimate", params={"params": "7B"}).json()["model"]["params"]


def test_model_card_of_a_pasted_config(client):
    from web_helpers import TINY_LLAMA

    d = client.post("/api/model", json={"config": TINY_LLAMA}).json()
    assert (d["layers"], d["heads"], d["kv_heads"]) == (TINY_LLAMA["num_hidden_layers"],
                                                         TINY_LLAMA["num_attention_heads"],
                                                         TINY_LLAMA.get("num_key_value_heads",
                                                                        TINY_LLAMA["num_attention_heads"]))
    assert d["source"] == "pasted config.json"


def test_views_refuse_a_missing_model_and_a_local_path(client):
    for path in ("/api/compare", "/api/gpu-matrix", "/api/model", "/api/estimate.html"):
        r = client.get(path, params={"gpu": "24GB"})
        assert r.status_code == 422 and "give a model" in r.json()["error"], path
        r = client.get(path, params={"model": "/etc/passwd"})
        assert r.status_code == 422 and "reads no local files" in r.json()["error"], path


def test_html_report_is_a_download(client):
    r = client.get("/api/estimate.html", params={"model": "gpt2", "gpu": "24GB"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["content-disposition"] == 'attachment; filename="vramlens-estimate.html"'
    assert "<script" not in r.text and "openai-community/gpt2" in r.text


def test_torchtitans_checkpointing_through_the_api(client):
    acts = {}
    for mode in ("none", "every:2", "selective-op", "full"):
        r = client.post("/api/estimate", json={"config": TINY_LLAMA, "mode": "train", "batch": 8, "seq": 1024,
                                               "checkpointing": mode})
        assert r.status_code == 200, r.text
        assert r.json()["workload"]["checkpointing"] == mode
        acts[mode] = r.json()["components"]["activations"]
    assert acts["full"] < acts["selective-op"] < acts["none"] and acts["full"] < acts["every:2"] < acts["none"]
    r = client.post("/api/estimate", json={"config": TINY_LLAMA, "mode": "train", "checkpointing": "every:1"})
    assert r.status_code == 422
    assert r.json() == {"error": "checkpointing='every:1' checkpoints every block: use --checkpointing full"}


def test_lora_fa_knob(client):
    body = {"config": TINY_LLAMA, "mode": "train", "method": "lora", "batch": 2}
    lora = client.post("/api/estimate", json=body).json()
    fa = client.post("/api/estimate", json={**body, "lora_fa": True}).json()
    assert fa["workload"]["lora_fa"] is True and lora["workload"]["lora_fa"] is False
    assert fa["peak_allocated_bytes"] < lora["peak_allocated_bytes"]
    assert client.get("/api/estimate", params={"model": "llama-3.2-3b", "mode": "train", "method": "lora",
                                               "lora_fa": "true"}).status_code == 200
