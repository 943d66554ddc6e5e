"""Published cases whose settings the tracer can run at full size, traced against the estimate.

PEFT's README row "bigscience/bloomz-7b1 | PEFT-LoRA PyTorch | 32GB GPU" (peft-readme-bloomz-7b1-lora-pytorch):
BLOOM-7b1 in fp32, LoRA r=8 on query_key_value with dropout 0.1, batch 8 x 64 tokens, eager attention, traced
on 3 of its 30 layers and extrapolated (measured: peak +0.01% against the trace, weights exact, activations +0.1%).
Its script ran BLOOM eager, as transformers still does whatever is asked (no SDPA path): checked on a tiny BLOOM."""

import pytest

pytest.importorskip("torch", reason="the tracer runs the real model under fake tensors")
pytest.importorskip("transformers", reason="the tracer builds transformers' BloomForCausalLM")
pytest.importorskip("peft", reason="the LoRA adapters come from peft")

from vramlens.published import CASES  # noqa: E402
from vramlens.trace.crosscheck import render, run_full_size_row  # noqa: E402

pytestmark = pytest.mark.slow


def test_peft_bloomz_lora_case_matches_trace():
    case = CASES["peft-readme-bloomz-7b1-lora-pytorch"]
    assert case.model is not None
    r = run_full_size_row(case.model, dict(case.settings))
    # 7,069,016,064 BLOOM-7b1 parameters in fp32, and per layer LoRA A (8 x 4,096) and B (12,288 x 8) in fp32:
    # 7,069,016,064 x 4 + 30 x 131,072 x 4 = 28,276,064,256 + 15,728,640 = 28,291,792,896 B
    assert r.estimate["weights"] == r.traced["weights"] == 28_291_792_896, render([r])
    assert abs(r.peak_error) <= 0.01, render([r])
    for c in r.traced:
        err = r.component_error(c)
        assert err is None or abs(err) <= 0.10, (c, render([r]))


def test_bloom_runs_eager_when_sdpa_is_asked():
    """transformers has no SDPA path for BLOOM: the estimate of --attention sdpa is eager's, as the trace is (a tiny
    BLOOM, 2 blocks of 256, LoRA on query_key_value, bf16, 2 x 128 tokens: activations within two 512-byte blocks)."""
    from vramlens.estimator import estimate
    from vramlens.models.catalog import find_config
    from vramlens.models.inventory import spec_from_config
    from vramlens.trace import trace
    from vramlens.trace.crosscheck import shrink

    found = find_config("bloom-7b1")
    assert found is not None
    cfg = shrink(found[1], 4)
    wl = dict(mode="train", method="lora", dtype="bf16", attention="sdpa", batch=2, seq=128,
              lora_targets=("query_key_value",))
    est = estimate(spec_from_config(cfg), **wl)
    assert est.breakdown.peak_allocated == estimate(spec_from_config(cfg), **{**wl, "attention": "eager"}
                                                    ).breakdown.peak_allocated
    assert any("no SDPA path" in n for n in est.breakdown.notes)
    traced = trace(cfg, steps=2, **wl).breakdown
    # measured: 8,679,424 B estimated, 8,678,400 traced (two 512-byte blocks apart); SDPA's would be 7.04 MiB
    assert abs(est.breakdown["activations"] - traced["activations"]) <= 2 * 512


def test_torchao_vit_h_rows_match_trace():
    """torchao's ViT-H rows (torchao-readme-vit-h-*): transformers' ViTForImageClassification of timm's ViT-H/14
    sizes, fp32 under bf16 autocast, batch 8, traced eagerly on 3 of its 32 blocks and extrapolated (the README's run
    was compiled, which the estimate does not model either) with torchao's own AdamW8bit. Measured: peak 8,513,572,864 B
    estimated (without the cuBLAS workspaces) against 8,498,500,608 traced (+0.2%), both in backward."""
    pytest.importorskip("torchao", reason="torchao's AdamW8bit runs in the trace (torchao is not in [all])")
    from vramlens.estimator import estimate
    from vramlens.estimator.runtime import runtime
    from vramlens.models import load_model
    from vramlens.trace import trace
    from vramlens.trace.crosscheck import FULL_SIZE_LAYERS

    case = CASES["torchao-readme-vit-h-ao-8bit"]
    assert case.model is not None
    cfg = {**load_model(case.model).config, **case.overrides}
    settings = {k: v for k, v in case.settings.items() if k != "compile"}
    est = estimate(cfg, **settings)
    tr = trace(cfg, steps=2, layers=FULL_SIZE_LAYERS, **settings).breakdown
    # 630,822,445 fp32 parameters, each tensor rounded to 512-byte blocks
    assert est.breakdown["weights"] == tr["weights"] == 2_523_290_112
    # a trace sees tensors only: the cuBLAS workspaces the estimate adds are left out of both
    est_peak = est.breakdown.peak_allocated - runtime(est.gpu, est.workload).workspace_bytes
    # torchao's 8-bit states, tensor by tensor: uint8 codes, an fp32 scale per 256 and a 256-entry fp32 qmap
    assert est.breakdown["optimizer_states"] == tr["optimizer_states"] == 1_284_084_736
    assert abs(est_peak - tr.peak_allocated) <= 0.02 * tr.peak_allocated, (est_peak, tr.peak_allocated)
