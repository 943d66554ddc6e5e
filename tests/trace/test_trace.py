"""Fake-tensor traces of tiny transformers: tags, steps, phases, extrapolation, errors."""

import subprocess
import sys

import pytest
from tests.trace.conftest import tiny_llama

from vramlens.errors import InputError, TraceError
from vramlens.trace import trace


def r512(n):
    return -(-n // 512) * 512


@pytest.fixture(scope="module")
def train_bf16():
    return trace(tiny_llama(), mode="train", dtype="bf16", batch=2, seq=64, steps=2)


def test_import_vramlens_does_not_import_torch():
    code = "import sys, vramlens, vramlens.trace, vramlens.cli.main; vramlens.cli.main.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_training_components_follow_the_model(train_bf16):
    r = train_bf16
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vramlens.trace.build import build_hf
    from vramlens.workload import make_workload

    fm = FakeTensorMode(allow_non_fake_inputs=True)
    built = build_hf(tiny_llama(), make_workload(mode="train"), fake_mode=fm)
    params = list(built.model.parameters())
    weights = sum(r512(p.numel() * 2) for p in params) + sum(r512(b.numel() * b.element_size()) for b in built.model.buffers())
    grads = sum(r512(p.numel() * 2) for p in params)
    assert r.breakdown["weights"] == weights
    assert r.breakdown["gradients"] == grads
    # AdamW: exp_avg and exp_avg_sq in the parameter's dtype (bf16 here), one per parameter
    assert r.breakdown["optimizer_states"] == 2 * grads
    assert r.breakdown["activations"] > 0
    assert r.params == sum(p.numel() for p in params)
    assert torch.is_tensor(params[0])


def test_two_steps_show_step_one_and_steady_state(train_bf16):
    steps = dict(train_bf16.step_peaks)
    assert set(steps) == {1, 2}
    # the optimizer state exists from step 1's optimizer step on: step 2 starts higher
    assert steps[2] >= steps[1]
    fwd1 = train_bf16.summary.phase_peak("forward", 1)
    fwd2 = train_bf16.summary.phase_peak("forward", 2)
    assert fwd2 - fwd1 == train_bf16.breakdown["optimizer_states"]
    assert {p for _, p, _ in train_bf16.phase_peaks} >= {"forward", "backward", "optimizer"}


def test_module_attribution(train_bf16):
    mods = {m for m, _ in train_bf16.summary.by_module}
    assert any(m.startswith("model.layers.0.") for m in mods)
    assert any(m.startswith("model.layers.1.") for m in mods)


def test_autocast_cache_counts_as_master_weights():
    r = trace(tiny_llama(), mode="train", dtype="fp32", amp="bf16", batch=2, seq=64)
    assert r.breakdown["master_weights"] > 0
    assert r.summary.by_tag["autocast_cache"] == r.breakdown["master_weights"]


def test_megatron_style_master_copy():
    r = trace(tiny_llama(), mode="train", dtype="bf16", amp="bf16", batch=2, seq=64)
    # fp32 master copy: twice the bf16 weights of every parameter (all trainable)
    assert r.summary.by_tag["master_weight"] >= 2 * r.summary.by_tag["parameter"] * 0.95


def test_inference_tags_kv_cache():
    r = trace(tiny_llama(), mode="inference", batch=2, seq=64, new_tokens=3)
    # keys and values of 64 + 3 tokens, 2 layers, 2 KV heads of 32, bf16; DynamicCache's cat
    # briefly holds a layer's old and new tensor together
    final = 2 * 2 * r512(2 * 2 * (64 + 3) * 32 * 2)
    assert final <= r.breakdown["kv_cache"] <= final * 1.3
    assert {p for _, p, _ in r.phase_peaks} >= {"prefill", "decode"}
    assert r.breakdown["gradients"] == 0


@pytest.mark.slow  # > 5 s on 2 cores (--durations)
def test_lora_and_qlora():
    lora = trace(tiny_llama(), mode="train", method="lora", lora_rank=8, batch=2, seq=64)
    full = trace(tiny_llama(), mode="train", batch=2, seq=64)
    assert lora.trainable_params < full.trainable_params / 10
    assert lora.breakdown["gradients"] < full.breakdown["gradients"] / 10
    q = trace(tiny_llama(), mode="train", method="qlora", lora_rank=8, batch=2, seq=64)
    assert q.breakdown["weights"] < lora.breakdown["weights"]
    assert any("NF4" in n for n in q.breakdown.notes)


@pytest.mark.slow  # > 5 s on 2 cores (--durations)
def test_checkpointing_lowers_activations():
    a = trace(tiny_llama(layers=3), mode="train", batch=2, seq=128, attention="eager")
    b = trace(tiny_llama(layers=3), mode="train", batch=2, seq=128, attention="eager", checkpointing="full")
    c = trace(tiny_llama(layers=3), mode="train", batch=2, seq=128, attention="eager", checkpointing="selective")
    assert b.breakdown["activations"] < c.breakdown["activations"] < a.breakdown["activations"]


def test_sdpa_saves_less_than_eager():
    eager = trace(tiny_llama(), mode="train", batch=2, seq=128, attention="eager")
    sdpa = trace(tiny_llama(), mode="train", batch=2, seq=128, attention="sdpa")
    assert sdpa.breakdown["activations"] < eager.breakdown["activations"]


@pytest.mark.slow  # > 5 s on 2 cores (--durations)
@pytest.mark.parametrize("kw", [
    dict(mode="train", dtype="bf16"),
    dict(mode="train", dtype="fp32", amp="bf16", checkpointing="full"),
    dict(mode="train", method="lora", attention="eager"),
    dict(mode="inference", new_tokens=3),
])
def test_extrapolation_agrees_with_full_trace(kw):
    cfg = tiny_llama(layers=8)
    full = trace(cfg, batch=2, seq=64, **kw)
    ex = trace(cfg, batch=2, seq=64, layers=3, **kw)
    assert ex.breakdown.source == "trace-extrapolated"
    assert abs(ex.peak_allocated / full.peak_allocated - 1) < 0.01
    for c, b in full.breakdown.as_dict().items():
        assert ex.breakdown[c] == pytest.approx(b, rel=0.01, abs=1024), c
    assert ex.params == full.params


def test_extrapolation_needs_three_layers():
    with pytest.raises(InputError, match="layers=2 must be >= 3"):
        trace(tiny_llama(layers=4), mode="train", layers=2)


def test_bitsandbytes_optimizer_is_refused_clearly():
    with pytest.raises(TraceError, match="optimizer=adamw-8bit comes from bitsandbytes"):
        trace(tiny_llama(), mode="train", optimizer="adamw-8bit", seq=16)


@pytest.mark.slow  # > 5 s on 2 cores (--durations)
def test_other_optimizers_run():
    for opt in ("sgd", "sgd-momentum", "adafactor", "none"):
        r = trace(tiny_llama(), mode="train", optimizer=opt, seq=16, batch=1)
        if opt in ("sgd", "none"):
            assert r.breakdown["optimizer_states"] == 0, opt
        else:
            assert r.breakdown["optimizer_states"] > 0, opt


def test_device_total_adds_what_lives_outside_the_allocator():
    """As `estimate` does: the reserve, plus cuBLAS workspaces, the CUDA context (and NCCL)."""
    from vramlens.estimator.runtime import runtime
    from vramlens.workload import make_workload

    wl = make_workload(mode="train", batch=1, seq=16)
    r = trace(tiny_llama(), wl, steps=1)
    rt = runtime(None, wl)
    assert r.breakdown.device_total == r.breakdown.peak_reserved + rt.workspace_bytes + rt.outside_allocator_bytes
    assert r.breakdown["runtime"] == rt.workspace_bytes + rt.outside_allocator_bytes > 0
