"""Memory techniques of training stacks, checked against their arithmetic (the tracer checks them
against the real modules in tests/trace/test_techniques.py)."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.workload import make_workload

TRAIN = dict(mode="train", batch=1, seq=512, dtype="bf16")


def test_optimizer_in_backward_holds_one_gradient(llama7b):
    plain = estimate(llama7b, **TRAIN).breakdown
    e = estimate(llama7b, **TRAIN, optimizer_in_backward=True).breakdown
    # the largest parameter: the (untied) embedding or lm_head, 32,000 x 4,096 bf16 (a multiple of 512 B)
    assert e["gradients"] == 32_000 * 4_096 * 2
    assert e["optimizer_states"] == plain["optimizer_states"] and e["weights"] == plain["weights"]
    # foreach Adam on one parameter: sqrt(exp_avg_sq) of the largest, bf16 states
    assert e["temporaries"] >= 32_000 * 4_096 * 2
    phases = dict(e.phases)
    # nothing is allocated in the optimizer phase: weights and the two Adam states only
    assert phases["optimizer"] < dict(plain.phases)["optimizer"]
    assert e.peak_allocated < plain.peak_allocated


def test_optimizer_in_backward_never_costs_more(llama7b):
    for kw in (dict(checkpointing="full"), dict(method="lora"), dict(dtype="fp32", amp="bf16"), dict(optimizer="sgd")):
        plain = estimate(llama7b, **{**TRAIN, **kw}).breakdown
        e = estimate(llama7b, **{**TRAIN, **kw}, optimizer_in_backward=True).breakdown
        assert e.peak_allocated <= plain.peak_allocated, kw


@pytest.mark.parametrize("kw, message", [
    (dict(grad_accum=4), "optimizer_in_backward steps each parameter as its gradient arrives, so gradients cannot "
                         "accumulate over grad_accum=4 micro-batches (torchtune refuses it too): drop --grad-accum "
                         "or --optimizer-in-backward"),
    (dict(optimizer="none"), "optimizer_in_backward needs an optimizer to step, and optimizer='none' runs none: "
                             "choose an --optimizer or drop --optimizer-in-backward"),
    (dict(zero=2, gpus=2), "optimizer_in_backward with zero, fsdp, offload or pp is not modelled: drop "
                           "--optimizer-in-backward, or estimate one GPU (data or tensor parallel)"),
])
def test_optimizer_in_backward_refusals(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(mode="train", optimizer_in_backward=True, **kw)
    assert str(e.value) == message


def test_optimizer_in_backward_is_ignored_in_inference():
    w = make_workload(optimizer_in_backward=True)
    assert w.ignored() == ["ignored in inference (they apply to training): optimizer_in_backward=True"]
