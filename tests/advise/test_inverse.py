"""Inverse questions: the value found fits and the next one does not."""

from __future__ import annotations

from dataclasses import replace

import pytest
from advise_specs import llama7b, tiny

from vramlens.advise.inverse import largest, max_batch, max_context, max_seq, min_gpu
from vramlens.advise.search import min_gpus
from vramlens.estimator import estimate_spec
from vramlens.hardware.catalog import get_gpu, list_gpus
from vramlens.workload import Workload


def _fits(spec, w, g):
    return estimate_spec(spec, w.validated(), g, headroom=0.1).fits


@pytest.mark.parametrize("w", [
    Workload(mode="train", method="lora", seq=1024, checkpointing="full"),
    Workload(mode="inference", seq=2048, new_tokens=256),
])
def test_max_batch_fits_and_one_more_does_not(w):
    spec, g = llama7b(), get_gpu("RTX-4090")
    r = max_batch(spec, w, g)
    assert r.value is not None and r.limited_by == "memory"
    assert _fits(spec, replace(w, batch=r.value), g)
    assert not _fits(spec, replace(w, batch=r.value + 1), g)
    assert r.device_total == estimate_spec(spec, replace(w, batch=r.value), g).breakdown.device_total


def test_max_seq_is_capped_by_the_model_or_memory():
    spec, g = llama7b(), get_gpu("RTX-4090")
    w = Workload(mode="train", method="qlora", batch=4)
    r = max_seq(spec, w, g)
    assert _fits(spec, replace(w, seq=r.value), g)
    if r.limited_by == "memory":
        assert not _fits(spec, replace(w, seq=r.value + 1), g)
    else:
        assert r.value == spec.max_position
    small = max_seq(tiny(), Workload(mode="inference"), get_gpu("H100-SXM-80GB"))
    assert small.value == tiny().max_position and small.limited_by == "max_position"


def test_max_context_counts_prompt_and_generated_tokens():
    spec, g = llama7b(), get_gpu("RTX-4090")
    w = Workload(mode="inference", seq=512, batch=16)
    r = max_context(spec, w, g)
    assert r.value is not None
    assert _fits(spec, replace(w, new_tokens=r.value - 512), g)
    if r.limited_by == "memory":
        assert not _fits(spec, replace(w, new_tokens=r.value - 512 + 1), g)


def test_nothing_fits_gives_none():
    r = largest(llama7b(), Workload(mode="inference"), get_gpu("RTX-3060"), "batch")
    assert r.value is None


def test_min_gpu_is_the_smallest_catalog_gpu_that_fits():
    spec = llama7b()
    w = Workload(mode="inference", seq=1024, new_tokens=128)
    g = min_gpu(spec, w)
    assert g is not None and _fits(spec, w, g)
    for other in list_gpus():
        if other.capacity_bytes < g.capacity_bytes:
            assert not _fits(spec, w, other), other.name


def test_min_gpus_finds_the_fewest():
    spec, g = llama7b(), get_gpu("A100-40GB")
    # torchao's 4-bit states fit this one GPU (35.99 GiB of 36 usable), and so do 8-bit states stepped in backward
    # (34.58 GiB: one gradient alive and reserved): forbidden here so that more are needed
    r = min_gpus(spec, Workload(mode="train", batch=8, seq=2048), g, method_locked=True,
                 forbid=["offload", "4bit", "optimizer-in-backward"])
    assert r.gpus is not None and not r.partial
    n, res = r.gpus, r.result
    assert n > 1 and res.plans
    assert res.plans[0].workload.gpus == n
