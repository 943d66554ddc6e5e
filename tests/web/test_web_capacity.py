"""GET /api/capacity: the same object as `vramlens capacity --json`, errors as {"error": ...}."""

from __future__ import annotations

import json

import pytest
from web_helpers import assert_json_error

from vramlens.cli.main import main

pytest.importorskip("fastapi", reason="the web app needs the [web] extra (fastapi)")


def test_get_capacity_equals_cli_json(client, capsys):
    params = {"model": "llama-3-8b", "engine": "vllm", "gpu": "A100-80GB", "tp": 2, "context": 4096,
              "max_model_len": 8192, "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.85}
    r = client.get("/api/capacity", params=params)
    assert r.status_code == 200, r.text
    capsys.readouterr()
    assert main(["capacity", "llama-3-8b", "--engine", "vllm", "--gpu", "A100-80GB", "--tp", "2", "--context", "4096",
                 "--max-model-len", "8192", "--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.85",
                 "--json"]) == 0
    assert r.json() == json.loads(capsys.readouterr().out)
    assert r.json()["figures"]["num_gpu_blocks"]["value"] > 0


def test_each_engine_answers(client):
    for engine, extra in (("sglang", {"mem_fraction_static": 0.85}), ("llama.cpp", {"ctx_size": 8192}),
                          ("transformers", {})):
        r = client.get("/api/capacity", params={"model": "llama-3-8b", "gpu": "L40S", "engine": engine, **extra})
        assert r.status_code == 200, r.text
        assert r.json()["engine"] == engine


def test_engine_refusals_and_bad_settings_are_json_errors(client):
    r = client.get("/api/capacity", params={"model": "llama-3-8b", "gpu": "A100-80GB", "tp": 3})
    assert "Total number of attention heads (32) must be divisible by tensor parallel size (3)." in \
        assert_json_error(r, (400, 422))
    r = client.get("/api/capacity", params={"model": "llama-3-8b", "gpu": "A100-80GB", "ctx_size": 10})
    assert "ctx_size is not a vllm setting" in assert_json_error(r, (400, 422))
    r = client.get("/api/capacity", params={"model": "llama-3-8b", "gpu": "A100-80GB", "bogus": 1})
    assert_json_error(r, (400, 422))
    r = client.get("/api/capacity", params={"model": "llama-3-8b", "gpu": "A100-80GB", "max_model_len": 10**40})
    assert_json_error(r, (400, 422))
    r = client.get("/api/capacity", params={"model": "x.gguf", "gpu": "A100-80GB", "engine": "llama.cpp"})
    assert "the web app reads no local files" in assert_json_error(r, (400, 422))


def test_every_capacity_flag_is_a_query_field():
    """The API takes every `vramlens capacity` engine flag (it lacked --swa-full-tokens-ratio: 422 'Extra inputs')."""
    from vramlens.cli.capacity import FLAGS
    from vramlens.web.app import CapacityQuery

    assert {dest for _flag, dest, _engines, _opts in FLAGS} <= set(CapacityQuery.model_fields)


def test_swa_full_tokens_ratio(client, capsys):
    params = {"model": "openai/gpt-oss-120b", "engine": "sglang", "gpu": "H100-SXM-80GB", "swa_full_tokens_ratio": 0.5}
    r = client.get("/api/capacity", params=params)
    assert r.status_code == 200, r.text
    capsys.readouterr()
    assert main(["capacity", "openai/gpt-oss-120b", "--engine", "sglang", "--gpu", "H100-SXM-80GB",
                 "--swa-full-tokens-ratio", "0.5", "--json"]) == 0
    assert r.json() == json.loads(capsys.readouterr().out)
    for bad in ("0", "-1", "2", "nan", "inf", "1e309"):
        r = client.get("/api/capacity", params=dict(params, swa_full_tokens_ratio=bad))
        assert "swa_full_tokens_ratio" in assert_json_error(r, (400, 422)), bad
    r = client.get("/api/capacity", params=dict(params, engine="vllm"))
    assert "swa_full_tokens_ratio" in assert_json_error(r, (400, 422))


def test_sglang_version_equals_cli_json(client, capsys):
    """`version` is the engine's own release for SGLang too (--sglang-version), and a bad one is a JSON error."""
    params = {"model": "llama-2-7b", "engine": "sglang", "gpu": "A100-80GB", "version": "0.4.5"}
    r = client.get("/api/capacity", params=params)
    assert r.status_code == 200, r.text
    capsys.readouterr()
    assert main(["capacity", "llama-2-7b", "--engine", "sglang", "--gpu", "A100-80GB", "--sglang-version", "0.4.5",
                 "--json"]) == 0
    assert r.json() == json.loads(capsys.readouterr().out)
    assert r.json()["accounting"].startswith("SGLang 0.4.5 ")
    r = client.get("/api/capacity", params={**params, "version": "0.3"})
    assert "give 0.3.3 or later" in assert_json_error(r, (400, 422))


def test_speculative_settings(client, capsys):
    """The capacity tab's speculative fields: the same JSON as the CLI; a draft is a catalog name or hub id only."""
    params = {"model": "llama-3.1-8b", "engine": "sglang", "gpu": "H100-SXM-80GB", "speculative_algorithm": "STANDALONE",
              "speculative_draft_model_path": "llama-3.2-1b"}
    r = client.get("/api/capacity", params=params)
    assert r.status_code == 200, r.text
    capsys.readouterr()
    assert main(["capacity", "llama-3.1-8b", "--engine", "sglang", "--gpu", "H100-SXM-80GB", "--speculative-algorithm",
                 "STANDALONE", "--speculative-draft-model-path", "llama-3.2-1b", "--json"]) == 0
    assert r.json() == json.loads(capsys.readouterr().out)
    r = client.get("/api/capacity", params={"model": "llama-3.1-8b", "gpu": "H100-SXM-80GB", "speculative_config":
                                            '{"method": "draft_model", "model": "/etc/draft.json", '
                                            '"num_speculative_tokens": 3}'})
    assert "the web app reads no local files" in assert_json_error(r, (400, 422))
