"""--loss logits-sum: the SDPA benchmark loop of transformers' model docs (``outputs = model(**inputs);
outputs.logits.sum().backward()``, no labels), from vramlens.estimator.losses. The tracer runs the same loop on
the real module: tests/trace/test_logits_sum.py."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.losses import loss_figures
from vramlens.models import load_model
from vramlens.workload import make_workload

# BERT-base's masked-LM head in fp16 at 4 x 256 tokens, no optimizer: the bert.md table's first row
HARNESS = dict(mode="train", dtype="fp16", optimizer="none", batch=4, seq=256, attention="eager")
LOGITS = 2 * 30_522 * 4 * 256  # 62,509,056 B: c * V * t
HEAD_GRAD = 2 * 30_522 * 768  # 46,881,792 B: the tied decoder's weight gradient, fp16 (V, h)
WORKSPACE = 2 * (33_554_432 + 1_048_576)  # 69,206,016 B: two cuBLAS handles on the default (Hopper) GPU


def test_figures_of_the_summed_logits():
    spec = load_model("bert-base-uncased")
    lf = loss_figures(spec, make_workload(**HARNESS, loss="logits-sum"), 4, 256)
    assert lf is not None
    assert lf.saved == LOGITS == 62_509_056  # held by the loop's outputs, not by autograd
    assert lf.peak == 2 * LOGITS == 125_018_112  # the previous step's beside them until the forward returns
    assert lf.backward == 0  # SumBackward: an expand of the scalar's gradient, no bytes
    assert lf.head_backward == 2 * LOGITS  # the held logits and their dense clone for the output layer's matmuls
    # the head's LayerNorm backward: its incoming gradient and its input's, 2 x (2 B x 768 x 1,024), beside the logits
    assert lf.final_norm_backward == 2 * (2 * 768 * 1024) + LOGITS == 65_654_784


def test_phases_are_the_harness_step():
    e = estimate("bert-base-uncased", **HARNESS, loss="logits-sum").breakdown
    c = e.as_dict()
    assert c["weights"] == 219_037_184 and c["gradients"] == 219_028_992
    acts = c["activations"]
    phases = dict(e.phases)
    # forward: weights, the saved activations (this step's logits among them) and the previous step's logits
    assert phases["forward"] == c["weights"] + acts + LOGITS + WORKSPACE == 931_741_184
    # backward starts at the output layer: the held logits, their dense gradient (one more LOGITS beyond what
    # the activations count) and the first weight gradient, the tied decoder's
    assert phases["backward"] == c["weights"] + acts + LOGITS + HEAD_GRAD + WORKSPACE == 978_622_976
    assert e.peak_allocated == 978_622_976


def test_against_transformers_cross_entropy():
    plain = estimate("bert-base-uncased", **HARNESS).breakdown
    summed = estimate("bert-base-uncased", **HARNESS, loss="logits-sum").breakdown
    # BERT's masked-LM loss keeps an fp16 log_softmax (V x 2 B per token), the sum keeps the logits: the same
    # bytes; the labels (8 B x 1,024 tokens) are not fed
    assert plain["activations"] - summed["activations"] == 8 * 4 * 256 == 8_192
    # the cross-entropy's backward holds two b*s*V gradients (125,018,112 B) where the sum holds one dense
    # gradient beside the logits and the decoder's weight gradient (62,509,056 + 46,881,792 B)
    assert plain.peak_allocated - summed.peak_allocated == 8_192 + 2 * LOGITS - (LOGITS + HEAD_GRAD) == 15_635_456


def test_causal_lm_logits_are_summed_too():
    kw = dict(HARNESS, batch=1, seq=1024)
    plain = estimate("opt-350m", **kw).breakdown
    summed = estimate("opt-350m", **kw, loss="logits-sum").breakdown
    # OPT's causal-LM loss upcasts the fp16 logits (kept: the fp32 log_softmax, 4 B x 50,272 per token); the
    # sum keeps the fp16 logits (2 B) and no labels (8 B x 1,024)
    assert plain["activations"] - summed["activations"] == (4 - 2) * 50_272 * 1024 + 8 * 1024 == 102_965_248


@pytest.mark.parametrize("model, kw, message", [
    ("bert-base-uncased", dict(loss="logits-sum", loss_chunks=8),
     "loss=logits-sum sums the whole logits (no cross-entropy to chunk); loss_chunks=8 applies to the "
     "cross-entropy loss: drop --loss-chunks"),
    ("bert-base-uncased", dict(loss="logits-sum", task="sequence-classification"),
     "loss=logits-sum sums a language model's logits; google-bert/bert-base-uncased trains sequence-classification: "
     "drop --loss or use --task causal-lm / masked-lm"),
])
def test_refusals(model, kw, message):
    with pytest.raises(ConfigError) as e:
        estimate(model, mode="train", **kw)
    assert str(e.value) == message


def test_a_tied_output_layer_peaks_at_the_embeddings_backward():
    # DistilBERT at 1 x 128 tokens: the last op of backward adds the embedding's weight gradient to the tied
    # decoder's (two V x h addends and their sum, every other gradient alive): fp16 (30,522 x 768) x 2 B each
    head_grad = 2 * 30_522 * 768  # 46,881,792 B
    logits = 2 * 30_522 * 128  # 7,813,632 B, still held by the loop's outputs under logits-sum
    kw = dict(HARNESS, batch=1, seq=128)
    for loss, held in (("logits-sum", logits), ("cross-entropy", 0)):
        e = estimate("distilbert-base-uncased", **kw, loss=loss).breakdown
        c = e.as_dict()
        assert c["weights"] == 133_975_552 and c["gradients"] == 133_971_456
        assert e.peak_phase == "backward"
        assert e.peak_allocated == c["weights"] + c["gradients"] + 2 * head_grad + held + WORKSPACE
    assert estimate("distilbert-base-uncased", **kw, loss="logits-sum").peak_allocated == 438_730_240


def test_logits_sum_holds_older_presents():
    """transformers < 4.45 (GPT-NeoX), < 4.49 (OPT), < 4.52 (GPT-2): the forward returns each block's (key, value)
    tuple (ModelSpec.legacy_presents) and the loop's outputs hold them (losses.presents_held)."""
    from vramlens.estimator.losses import presents_held

    t = 2048
    kw = dict(mode="train", dtype="fp16", optimizer="none", loss="logits-sum", batch=1, seq=t)
    neox, gpt2, opt = load_model("pythia-410m"), load_model("gpt2-large"), load_model("opt-350m")
    # GPT-NeoX 4.42: the value views query_key_value's (b, s, 3h) output, 2 B x 3,072 x 2,048 = 12,582,912 B a block,
    # and the key is fp32, 4 B x 1,024 x 2,048 = 8,388,608 B: SDPA keeps its fp16 cast, eager's baddbmm the fp32 key
    # (counted in the blocks) and a copy of the value, not the fused output
    for attention, beyond in (("sdpa", 24 * 8_388_608), ("eager", 24 * 12_582_912)):
        w = make_workload(**kw, attention=attention, transformers_version="4.42")
        assert presents_held(neox, w, t) == (24 * (12_582_912 + 8_388_608), beyond)
    # GPT-2: c_attn's (b, s, 3h) output, 2 B x 3,840 x 2,048 = 15,728,640 B a block (36); eager copies q, k, v
    w = make_workload(**kw, attention="sdpa", transformers_version="4.51")
    assert presents_held(gpt2, w, t) == (36 * 15_728_640, 0) == (566_231_040, 0)
    w = make_workload(**kw, attention="eager", transformers_version="4.51")
    assert presents_held(gpt2, w, t) == (566_231_040, 566_231_040)
    # OPT: contiguous keys and values, 2 x 2 B x 1,024 x 2,048 a block, which SDPA and eager's bmm keep anyway
    for attention in ("sdpa", "eager"):
        w = make_workload(**kw, attention=attention, transformers_version="4.45")
        assert presents_held(opt, w, t) == (24 * 2 * 4_194_304, 0) == (201_326_592, 0)
    # the releases that return a Cache object; gradient checkpointing turns use_cache off; a loss that is not the loop's
    for spec, w in ((neox, make_workload(**kw, transformers_version="4.45")),
                    (gpt2, make_workload(**kw, transformers_version="4.52")),
                    (opt, make_workload(**kw, transformers_version="4.49")),
                    (neox, make_workload(**kw, transformers_version="4.42", checkpointing="full")),
                    (neox, make_workload(**{**kw, "loss": "cross-entropy"}, transformers_version="4.42")),
                    (neox, make_workload(**kw))):
        assert presents_held(spec, w, t) == (0, 0)


def test_older_presents_in_the_phases():
    # pythia-410m at 1 x 2,048 tokens, SDPA: 4.42 against 4.48 (both with the per-block buffers and fp32 rotary)
    kw = dict(HARNESS, loss="logits-sum", batch=1, seq=2048, attention="sdpa")
    old = estimate("pythia-410m", **kw, transformers_version="4.42").breakdown
    new = estimate("pythia-410m", **kw, transformers_version="4.48").breakdown
    prev, fp32_keys = 24 * (12_582_912 + 8_388_608), 24 * 8_388_608
    # the forward's end: the previous step's tuples, and this step's fp32 keys, which autograd does not keep
    assert dict(old.phases)["forward"] - dict(new.phases)["forward"] == prev + fp32_keys == 704_643_072
    assert old.peak_phase == "forward"
    # the end of backward (every gradient made): this step's tuples and logits still held by the loop's outputs
    logits = 2 * 50_304 * 2048  # 206,045,184 B
    end = old.as_dict()["weights"] + old.as_dict()["gradients"] + logits + prev + WORKSPACE
    assert dict(old.phases)["optimizer"] == end
