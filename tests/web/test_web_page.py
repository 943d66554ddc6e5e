"""The page: one self-contained document with every knob."""

from __future__ import annotations

import re

EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)


def test_page_is_self_contained(client):
    r = client.get("/")
    assert r.status_code == 200
    doc = r.text
    assert not EXTERNAL.search(doc)
    assert "{{" not in doc  # every placeholder filled
    assert "default-src 'none'" in r.headers["content-security-policy"]
    for knob in ("model", "params", "gpu", "mode", "method", "dtype", "amp", "quant", "optimizer", "batch", "seq",
                 "new_tokens", "grad_accum", "checkpointing", "attention", "lora_rank", "gpus", "zero", "fsdp",
                 "tp", "pp", "offload", "kv_dtype"):
        assert f'data-param="{knob}"' in doc, knob
    assert 'id="f-config"' in doc and 'id="total"' in doc


def test_serve_defaults_to_localhost():
    import argparse

    from vramlens.cli import serve

    parser = argparse.ArgumentParser()
    serve.add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve"])
    assert (args.host, args.port) == ("127.0.0.1", 8000)


def test_page_has_a_knob_for_every_workload_setting():
    from dataclasses import fields

    from vramlens.web.page import KNOBS
    from vramlens.workload import Workload

    knobs = {k[0] for k in KNOBS}
    # lora_dropout is an API-only refinement
    assert {f.name for f in fields(Workload)} - {"lora_dropout"} <= knobs


def test_optimizer_knob_offers_torchao_and_bitsandbytes(client):
    doc = client.get("/").text
    for name in ("adamw-8bit", "adamw-8bit-torchao", "adamw-4bit-torchao", "adamw-fp8-torchao",
                 "adamw-cpu-offload-torchao"):
        assert f'<option value="{name}"' in doc or f'<option>{name}</option>' in doc, name


def test_checkpointing_knob_offers_torchtitans_modes(client):
    doc = client.get("/").text
    knob = doc[doc.index('data-param="checkpointing"'):]
    knob = knob[:knob.index("</select>")]
    for mode in ("none", "full", "selective", "selective-op", "every:2", "every:4"):
        assert f'value="{mode}"' in knob, mode
