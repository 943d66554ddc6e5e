"""Invariants of the estimator (hypothesis)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from vramlens.estimate import estimate_spec
from vramlens.models import load_model
from vramlens.workload import make_workload

from _specs import llama_config

SPEC = load_model(llama_config(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                               num_attention_heads=16, num_key_value_heads=4, vocab_size=32000))

base = st.fixed_dictionaries({
    "mode": st.sampled_from(["train", "inference"]),
    "dtype": st.sampled_from(["fp32", "bf16"]),
    "method": st.sampled_from(["full", "lora"]),
    "attention": st.sampled_from(["eager", "sdpa"]),
    "checkpointing": st.sampled_from(["none", "full", "selective"]),
    "batch": st.integers(1, 16),
    "seq": st.integers(1, 4096),
    "lora_rank": st.integers(1, 128),
})


def total(**kw) -> int:
    return estimate_spec(SPEC, make_workload(**kw)).breakdown.peak_allocated


@settings(max_examples=150, deadline=None)
@given(base, st.integers(1, 8))
def test_monotone_in_batch(kw, extra):
    assert total(**kw) <= total(**{**kw, "batch": kw["batch"] + extra})


@settings(max_examples=150, deadline=None)
@given(base, st.integers(1, 2048))
def test_monotone_in_sequence(kw, extra):
    assert total(**kw) <= total(**{**kw, "seq": kw["seq"] + extra})


@settings(max_examples=100, deadline=None)
@given(base, st.integers(1, 64))
def test_monotone_in_lora_rank(kw, extra):
    kw = {**kw, "method": "lora"}
    assert total(**kw) <= total(**{**kw, "lora_rank": kw["lora_rank"] + extra})


@settings(max_examples=150, deadline=None)
@given(base)
def test_checkpointing_never_raises_activation_memory(kw):
    kw = {**kw, "mode": "train"}
    def acts(mode):
        return estimate_spec(SPEC, make_workload(**{**kw, "checkpointing": mode})).breakdown["activations"]
    assert acts("full") <= acts("none")
    assert acts("selective") <= acts("none")


@settings(max_examples=100, deadline=None)
@given(base, st.sampled_from([2, 4, 8, 64]))
def test_higher_zero_stage_never_raises_per_gpu_memory(kw, gpus):
    kw = {**kw, "mode": "train", "gpus": gpus}
    peaks = [total(**{**kw, "zero": z}) for z in (0, 1, 2, 3)]
    # stage 0 (DDP) also pays gradient buckets; stages 1-3 shard more and more
    assert all(a >= b for a, b in zip(peaks, peaks[1:])), peaks
