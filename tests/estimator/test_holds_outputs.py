"""--holds-outputs: a training loop that keeps ``outputs = model(**batch)`` until the next forward returns (the HF
course's and accelerate's loops, PEFT's method comparison). The arithmetic on worked cases; the tracer checks the
same differences on the real modules (tests/trace/test_holds_outputs.py)."""

from __future__ import annotations

import pytest

from vramlens.errors import InputError
from vramlens.estimator import estimate
from vramlens.workload import Workload

QWEN = dict(mode="train", dtype="bf16", batch=2, seq=256)  # Qwen2.5-0.5B: 24 layers, 2 KV heads of 64, vocab 151,936
LOGITS = 2 * 151_936 * 512  # 155,582,464 B of bf16 logits for 2 x 256 tokens
CACHE = 24 * 2 * 2 * 64 * 512 * 2  # 6,291,456 B: keys and values of every layer


def _added(model: str, held: str = "next-forward", **kw) -> dict[str, int]:
    base = dict(estimate(model, **kw).breakdown.phases)
    with_held = dict(estimate(model, **kw, holds_outputs=held).breakdown.phases)
    return {p: with_held[p] - base[p] for p in base}


def test_the_logits_and_the_cache_stay_to_the_next_forward():
    # the previous step's logits and DynamicCache at this forward's loss (the loss runs inside the forward) and
    # through the optimizer step; in backward this step's logits, which the Trainer would have dropped
    assert _added("qwen2.5-0.5b", **QWEN) == {"forward": LOGITS + CACHE, "backward": LOGITS,
                                               "optimizer": LOGITS + CACHE}


def test_eager_gqa_keeps_the_cache_copies_on_top():
    # repeat_kv's expanded copies are what eager's matmuls keep: the cache's own copies come on top in backward,
    # and this step's come beside the previous step's at the loss
    assert _added("qwen2.5-0.5b", **QWEN, attention="eager") == {
        "forward": LOGITS + 2 * CACHE, "backward": LOGITS + CACHE, "optimizer": LOGITS + CACHE}


def test_gradient_checkpointing_turns_the_cache_off():
    assert _added("qwen2.5-0.5b", **QWEN, checkpointing="full") == {
        "forward": LOGITS, "backward": LOGITS, "optimizer": LOGITS}


def test_gpt_neox_sdpa_saves_the_fused_output():
    # Pythia-160m, 12 layers of hidden 768, vocab 50,304, 4 x 256 tokens: the kernel keeps v's copy, not v's view of
    # the fused query_key_value output, so the step saves as much as the cache holds (traced: pythia-160m)
    logits, cache = 2 * 50_304 * 1024, 12 * 2 * 768 * 1024 * 2
    added = _added("pythia-160m", mode="train", dtype="bf16", batch=4, seq=256)
    assert added == {"forward": logits, "backward": logits - cache, "optimizer": logits + cache}


def test_logits_sum_holds_todays_cache():
    # the SDPA benchmarks' loop (--loss logits-sum) holds its outputs anyway: today's DynamicCache is in them
    # (GPT-2, 12 layers of hidden 768, fp16, 4 x 256 tokens: 37,748,736 B), on top of c_attn's output that q keeps
    kw = dict(mode="train", dtype="fp16", batch=4, seq=256, loss="logits-sum")
    today = dict(estimate("gpt2", **kw).breakdown.phases)
    cache = 12 * 2 * 768 * 1024 * 2
    no_cache = dict(estimate("gpt2", **kw, checkpointing="full").breakdown.phases)
    assert today["optimizer"] - no_cache["optimizer"] == cache


def test_ignored_where_not_modelled_and_in_inference():
    w = Workload(mode="train", holds_outputs="next-forward", loss_chunks=8).validated()
    assert not w.outputs_held
    assert any(n.startswith("ignored: holds_outputs='next-forward'") and "--loss-chunks" in n for n in w.ignored())
    assert Workload(mode="inference", holds_outputs="step").validated().ignored() == [
        "ignored in inference: holds_outputs='step' is what a training loop keeps between steps"]
    assert Workload(mode="train", holds_outputs="next-forward").validated().ignored() == []


def test_must_be_a_lifetime():
    with pytest.raises(InputError, match="holds_outputs='yes' is not one of: none, step, next-forward"):
        Workload(mode="train", holds_outputs="yes").validated()  # type: ignore[arg-type]


def test_held_through_the_step_only():
    # ``del outputs`` after backward: this step's logits in backward (as with next-forward), nothing at the next
    # forward's loss and nothing through the optimizer step (traced: tests/trace/test_holds_outputs.py)
    assert _added("qwen2.5-0.5b", **QWEN, held="step") == {"forward": 0, "backward": LOGITS, "optimizer": 0}


def test_earlier_spellings_are_read():
    # before holds_outputs was the one lifetime: a bool, and the lifetimes of --output-upcast / --bnb-inputs
    from vramlens.workload import make_workload

    assert make_workload(mode="train", holds_outputs=True).holds_outputs == "next-forward"
    assert make_workload(mode="train", holds_outputs="false").holds_outputs == "none"
    qlora = dict(mode="train", method="qlora", quant="nf4", loss_chunks=4, loss_upcast=False)
    w = make_workload(**qlora, bnb_inputs="next-forward", output_upcast="next-forward")
    assert (w.bnb_inputs, w.output_upcast, w.holds_outputs) == (True, True, "next-forward")
    w = make_workload(**qlora, bnb_inputs="step", output_upcast="none")
    assert (w.bnb_inputs, w.output_upcast, w.holds_outputs) == (True, False, "step")
    # a lifetime given in holds_outputs wins
    assert make_workload(**qlora, bnb_inputs="step", holds_outputs="next-forward").holds_outputs == "next-forward"


def test_the_held_cache_ignores_the_inference_cache_settings():
    # the training forward's DynamicCache is in the compute dtype, unpaged: --kv-dtype and --kv-block are ignored
    # in training (GPT-2: the held cache's copies are on top of what autograd keeps, so a changed size would show)
    base = estimate("gpt2", mode="train", holds_outputs=True).breakdown.phases
    assert estimate("gpt2", mode="train", holds_outputs=True, kv_dtype="fp8", kv_block=16).breakdown.phases == base
