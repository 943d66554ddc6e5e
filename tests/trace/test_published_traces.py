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
