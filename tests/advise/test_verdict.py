"""Issue 13: one verdict rule everywhere, 'it already fits' as an answer, minimal plans, and one
answer to 'which GPU would fit'."""

from __future__ import annotations

from dataclasses import replace

import pytest
from advise_specs import llama7b

from vramlens.advise import fit
from vramlens.advise.inverse import min_gpu
from vramlens.advise.search import _UNDO, hardware_that_fits
from vramlens.estimator import estimate_spec
from vramlens.estimator.verdict import verdict
from vramlens.hardware.catalog import get_gpu
from vramlens.hardware.gpu import GPU
from vramlens.workload import Workload

GiB = 2**30


@pytest.mark.parametrize("w,gpu", [
    (Workload(mode="inference", seq=2048, new_tokens=128), "L4"),           # fits with room
    (Workload(mode="train", method="lora", batch=4, seq=1024), "RTX-4090"),  # within 10% of the top
    (Workload(mode="train", batch=8, seq=2048), "A100-80GB"),               # does not fit
])
def test_headroom_bytes_is_consistent_with_fits(w, gpu):
    """It used to be capacity - total, so 'DOES NOT FIT with 0.82 GiB to spare' could be printed."""
    g = get_gpu(gpu)
    e = estimate_spec(llama7b(), w, g, headroom=0.1)
    assert e.headroom_bytes == int(g.capacity_bytes * 0.9) - e.device_total
    assert e.fits == (e.headroom_bytes >= 0)


def test_the_verdict_says_both_numbers():
    g = GPU(name="G", memory_bytes=24 * GiB, bandwidth_bytes_s=1e12, bf16_flops=1e14, fp16_flops=1e14, fp32_flops=1e13, arch="hopper")
    # 24 GiB less 10% = 21.6 GiB usable (23,192,823,398 B, rounded down)
    assert verdict(int(13.2 * GiB), g, 0.1) == (
        "fits (G): 13.20 GiB of 21.60 GiB usable (24.00 GiB less 10% headroom), 8.40 GiB to spare")
    assert verdict(int(30.1 * GiB), g, 0.1, gpus=2) == (
        "does not fit per GPU (2 x G): needs 30.10 GiB, 21.60 GiB usable (24.00 GiB less 10% headroom), 8.50 GiB short")


def test_a_workload_that_fits_is_the_answer_with_its_spare_memory():
    spec, g = llama7b(), get_gpu("H100-SXM-80GB")
    w = Workload(mode="train", method="lora", batch=1, seq=512)
    r = fit(spec, w, g)
    assert r.already_fits and len(r.plans) == 1 and r.plans[0].workload == w
    assert r.message == verdict(r.plans[0].device_total, g, 0.1)
    assert r.to_dict()["already_fits"] is True
    more = fit(spec, w, g, optimize="speed")
    assert not more.already_fits and more.plans


def _needed(spec, g, p, base):
    """Every change of ``p`` is needed: undoing it breaks a rule, misses, or is slower."""
    for group in _UNDO:
        if all(getattr(p.workload, f) == getattr(base, f) for f in group):
            continue
        u = replace(p.workload, **{f: getattr(base, f) for f in group})
        if u.problems() or u.effective_batch != p.workload.effective_batch:
            continue
        e = estimate_spec(spec, u, g)
        if not e.fits:
            continue
        from vramlens.advise.cost import training_step

        assert training_step(spec, u, g, trainable=e.trainable_params).seconds > p.cost.seconds, (group, u)


@pytest.mark.parametrize("gpu,gpus", [("RTX-4090", 1), ("A100-80GB", 8)])
def test_plans_are_minimal(gpu, gpus):
    spec, g = llama7b(), get_gpu(gpu)
    base = Workload(mode="train", batch=8, seq=2048)
    r = fit(spec, base, g, gpus=gpus, max_plans=5)
    assert r.plans
    for p in r.plans:
        _needed(spec, g, p, replace(base, gpus=gpus))


def test_inference_plans_never_shard_or_offload_training_state():
    r = fit(llama7b(), Workload(mode="inference", batch=8, seq=4096, new_tokens=512), get_gpu("L4"), max_plans=20)
    for p in r.plans:
        assert p.workload.zero == 0 and not p.workload.fsdp and p.workload.offload == "none"


def test_would_fit_on_and_min_gpu_agree():
    """They answered H100-PCIe-80GB and H100-SXM-80GB for the same plan."""
    spec = llama7b()
    w = Workload(mode="train", batch=4, seq=2048, checkpointing="full", optimizer="adamw-8bit")
    g = min_gpu(spec, w, headroom=0.1)
    assert g is not None and hardware_that_fits(spec, w, headroom=0.1) == g.name
