"""Estimate against trace for the workload settings the cross-check matrix does not vary:
optimizers, DeepSpeed-style mixed precision, QLoRA, gradient accumulation, forward+backward only."""

import pytest

from vramlens.estimator import estimate
from vramlens.estimator.runtime import runtime
from vramlens.models import load_model
from vramlens.trace import trace
from vramlens.trace.crosscheck import tiny_config

SPEC = load_model(tiny_config("llama-2-7b"))
BASE = dict(mode="train", dtype="bf16", batch=2, seq=128)


@pytest.mark.slow  # > 5 s on 2 cores (--durations)
@pytest.mark.parametrize("settings", [
    dict(optimizer="sgd"), dict(optimizer="sgd-momentum"), dict(optimizer="adafactor"), dict(optimizer="adam"),
    dict(optimizer="none"), dict(method="qlora", lora_targets="all-linear"), dict(dtype="fp16", amp="fp16"),
    dict(grad_accum=2), dict(keep_grads=True, optimizer="sgd-momentum"),
], ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_estimate_matches_trace(settings):
    kw = {**BASE, **settings}
    traced = trace(SPEC, **kw).breakdown
    est = estimate(SPEC, **kw)
    peak = est.breakdown.peak_allocated - runtime(est.gpu, est.workload).workspace_bytes
    assert abs(peak / traced.peak_allocated - 1) <= 0.05, (peak, traced.peak_allocated)
    for name, value in est.breakdown.as_dict().items():
        if name == "runtime":
            continue
        t = traced[name]
        assert abs(value - t) <= 0.10 * max(t, value), (name, value, t)
