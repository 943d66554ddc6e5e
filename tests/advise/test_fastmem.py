"""The search's memoized evaluator agrees with estimate_spec to the byte."""

from __future__ import annotations

import random

import pytest
from advise_specs import llama7b, tiny

from vramlens.advise.fastmem import FastMemory
from vramlens.estimator import estimate_spec
from vramlens.hardware.catalog import get_gpu
from vramlens.workload import OPTIMIZER_IMPLS, PP_SCHEDULES, Workload


def _random_workload(rng: random.Random) -> Workload:
    dtype, amp = rng.choice([("bf16", None), ("bf16", "bf16"), ("fp32", "bf16"), ("fp32", None), ("fp16", "fp16")])
    gpus = rng.choice([1, 2, 4, 8])
    tp = rng.choice([t for t in (1, 2, 4) if gpus % t == 0])
    pp = rng.choice([p for p in (1, 2) if (gpus // tp) % p == 0])
    z, fsdp, off = rng.choice([(0, False, "none"), (1, False, "none"), (2, False, "optimizer"), (3, False, "all"),
                               (0, True, "none"), (0, True, "optimizer"), (2, False, "none")])
    return Workload(
        mode="train", method=rng.choice(["full", "lora", "qlora"]), dtype=dtype, amp=amp,
        optimizer=rng.choice(["adamw", "adamw-8bit", "sgd", "adafactor", "lion"]),
        optimizer_impl=rng.choice(OPTIMIZER_IMPLS),
        batch=rng.choice([1, 2, 3, 8]), seq=rng.choice([128, 512, 2048]), grad_accum=rng.choice([1, 2, 4]),
        checkpointing=rng.choice(["none", "full", "selective", "selective-op", "every:2", "every:3"]), attention=rng.choice(["eager", "sdpa", "flash"]),
        lora_rank=rng.choice([8, 16]), gpus=gpus, tp=tp, pp=pp, zero=z, fsdp=fsdp, offload=off,
        compile=rng.random() < 0.3,  # the compiled block where it applies (vramlens.estimator.compiled)
        pp_schedule=rng.choice(PP_SCHEDULES) if pp > 1 else "1f1b",
    )


@pytest.mark.parametrize("make_spec", [llama7b, tiny])
def test_fast_totals_equal_estimate_spec(make_spec):
    spec = make_spec()
    gpu = get_gpu("A100-80GB")
    fm = FastMemory(spec, gpu)
    rng = random.Random(5)
    checked = 0
    for _ in range(1500):
        w = _random_workload(rng)
        got = fm.totals(w)
        if w.problems():
            assert got is None
            continue
        e = estimate_spec(spec, w, gpu)
        assert got == (e.breakdown.device_total, e.breakdown.host_bytes), w
        checked += 1
    assert checked > 300


def test_inference_totals_equal_estimate_spec():
    spec = llama7b()
    gpu = get_gpu("RTX-4090")
    fm = FastMemory(spec, gpu)
    w = Workload(mode="inference", seq=1024, new_tokens=256, batch=2, quant="nf4", kv_dtype="fp8")
    e = estimate_spec(spec, w, gpu)
    assert fm.totals(w) == (e.breakdown.device_total, e.breakdown.host_bytes)


def test_fast_totals_follow_estimate_spec_where_sdpa_is_refused():
    """gpt-oss has no SDPA path in transformers: both run --attention sdpa as eager."""
    from vramlens.models import spec_from_config
    from vramlens.trace.crosscheck import tiny_config

    spec = spec_from_config(tiny_config("gpt-oss-20b"))
    gpu = get_gpu("A100-80GB")
    fm = FastMemory(spec, gpu)
    for mode, method in (("train", "full"), ("train", "lora"), ("inference", "full")):
        w = Workload(mode=mode, method=method, dtype="bf16", attention="sdpa", batch=2, seq=256,
                     lora_targets=("q_proj", "v_proj"))
        e = estimate_spec(spec, w, gpu)
        assert fm.totals(w) == (e.breakdown.device_total, e.breakdown.host_bytes), (mode, method)
        assert any("no SDPA path" in n for n in e.breakdown.notes)


@pytest.mark.parametrize("changes", [dict(), dict(checkpointing="full"), dict(method="lora"), dict(batch=4, seq=2048)])
def test_fast_totals_equal_estimate_spec_compiled(changes):
    # the compiled block (vramlens.estimator.compiled) applies: FastMemory keys its activations on compile
    spec = llama7b()
    gpu = get_gpu("A100-80GB")
    fm = FastMemory(spec, gpu)
    for comp in (False, True):
        w = Workload(mode="train", dtype="bf16", attention="sdpa", compile=comp, **changes)
        e = estimate_spec(spec, w, gpu)
        assert fm.totals(w) == (e.breakdown.device_total, e.breakdown.host_bytes)
    assert estimate_spec(spec, Workload(mode="train", dtype="bf16", compile=True, **changes), gpu).breakdown[
        "activations"] < estimate_spec(spec, Workload(mode="train", dtype="bf16", **changes), gpu).breakdown["activations"]


def test_fast_totals_keep_torchtunes_2024_set_up_reserve():
    # torchtune's 2024 QLoRA set-up (quantize_on_device in training) leaves a reserve above the step's: the state
    # carries it (TrainState.setup_reserve), so the search's totals keep it too
    spec = llama7b()
    gpu = get_gpu("A100-80GB")
    base = dict(mode="train", method="qlora", nf4_impl="torchao", batch=2, seq=512, checkpointing="full",
                lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                quant_targets="adapted", attention="sdpa")
    plain, kept = Workload(**base), Workload(**base, quantize_on_device=True)
    e, e_plain = estimate_spec(spec, kept, gpu), estimate_spec(spec, plain, gpu)
    assert e.breakdown.device_total > e_plain.breakdown.device_total
    assert FastMemory(spec, gpu).totals(kept) == (e.breakdown.device_total, e.breakdown.host_bytes)


def test_fast_totals_equal_estimate_spec_for_peft_methods():
    """LoHa, LoKr, OFT under checkpointing, in the weights' dtype and under autocast, IA3 under autocast: the delta's
    recomputation and dtype reach FastMemory through the activations (recompute, dequant_temporary) and the state
    (autocast copies)."""
    spec = llama7b()
    gpu = get_gpu("A100-80GB")
    fm = FastMemory(spec, gpu)
    base = dict(mode="train", method="loha", lora_rank=16, dtype="bf16", attention="sdpa", batch=1, seq=64)
    for changes in (dict(checkpointing="full"), dict(checkpointing="every:2", method="oft"),
                    dict(lora_dtype="bf16", method="lokr"), dict(dtype="fp32", amp="bf16"),
                    dict(dtype="fp32", amp="bf16", method="oft"), dict(dtype="fp32", amp="fp16", method="ia3"),
                    dict(method="oft", quant="nf4-dq"), dict(method="boft", quant="fp4", checkpointing="full"),
                    dict(method="vera", quant="nf4-dq", vera_rank=16)):
        w = Workload(**{**base, **changes})
        e = estimate_spec(spec, w, gpu)
        assert fm.totals(w) == (e.breakdown.device_total, e.breakdown.host_bytes), changes
