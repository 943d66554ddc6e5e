"""--quant-head (the output layer in the quantized format: LitGPT's QLoRA, torchao, gpt-fast) and
--dequant-dtype fp16 (bitsandbytes 0.42.0 quantizes weight.half()), checked against their arithmetic on
Llama-2-7B's shapes (h 4,096, f 11,008, V 32,000, untied); the tracer checks them against NF4 modules in
tests/trace/test_quant_head.py and tests/trace/test_techniques.py (QLORA_ROWS)."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.activations import head_dequant_inference, head_dequant_transients
from vramlens.estimator.weights import dequant_cast_bytes, head_dequantized_bytes, quantized_linear_bytes
from vramlens.workload import make_workload

QLORA = dict(mode="train", method="qlora", dtype="bf16", batch=1, seq=512)


def test_the_head_in_nf4_dq_replaces_its_bf16_weight(llama7b):
    plain = estimate(llama7b, **QLORA).breakdown["weights"]
    quant = estimate(llama7b, **QLORA, quant_head=True).breakdown["weights"]
    # (32,000 x 4,096) = 131,072,000 codes: 65,536,000 B packed, 2,048,000 uint8 absmax, 8,000 fp32
    # second-level absmax (32,000 B -> 32,256) and the fp32 offset (512 B)
    assert quantized_linear_bytes(32_000, 4_096, "nf4-dq") == 65_536_000 + 2_048_000 + 32_256 + 512 == 67_616_768
    assert plain - quant == 32_000 * 4_096 * 2 - 67_616_768 == 194_527_232


def test_an_int8_head_for_inference_is_weights_only(llama7b):
    inf = dict(mode="inference", quant="int8", batch=4, seq=16, new_tokens=4)
    plain, quant = estimate(llama7b, **inf).breakdown, estimate(llama7b, **inf, quant_head=True).breakdown
    # LLM.int8: n*k int8 + 4n fp32 row scales = 131,072,000 + 128,000
    assert plain["weights"] - quant["weights"] == 262_144_000 - 131_200_000 == 130_944_000
    assert plain["activations"] == quant["activations"]  # no dequantized transient for int8


def test_training_head_transients(llama7b):
    w = make_workload(**QLORA, quant_head=True)
    # the dequantized head (32,000 x 4,096 bf16) = 262,144,000 B; the logits (512 x 32,000 bf16) = 32,768,000 B;
    # the input's gradient (512 x 4,096 bf16) = 4,194,304 B
    assert head_dequantized_bytes(llama7b, w) == (262_144_000, 0)
    assert head_dequant_transients(llama7b, w, 1, 512) == (262_144_000 + 32_768_000,
                                                           32_768_000 + 262_144_000 + 4_194_304)
    # the backward's (the logits' gradient, the weight, the input's gradient) is the largest temporary
    assert estimate(llama7b, **QLORA, quant_head=True).breakdown["temporaries"] == 299_106_304
    # dequantized to fp16 first: the fp16 weight (262,144,000 B) replaces the input's gradient at the cast
    fp16 = make_workload(**QLORA, quant_head=True, dequant_dtype="fp16")
    assert head_dequant_transients(llama7b, fp16, 1, 512) == (262_144_000 * 2, 32_768_000 + 2 * 262_144_000)
    assert estimate(llama7b, **QLORA, quant_head=True, dequant_dtype="fp16").breakdown["temporaries"] == 557_056_000


def test_chunked_head_transients(llama7b):
    w = make_workload(**{**QLORA, "batch": 2}, quant_head=True, loss_chunks=4)
    # 4 chunks of 2 x 128 tokens: one chunk's logits 2 x 128 x 32,000 x 2 B = 16,384,000; input gradient 2 x 128 x
    # 4,096 x 2 = 2,097,152. Forward at the last chunk: three earlier chunks' logits + weight + its logits;
    # backward at the first head call: the four chunks' logit gradients + weight + the chunk's input gradient
    assert head_dequant_transients(llama7b, w, 2, 512) == (3 * 16_384_000 + 262_144_000 + 16_384_000,
                                                           4 * 16_384_000 + 262_144_000 + 2_097_152)


def test_inference_head_dequantized_unless_one_row(llama7b):
    w = make_workload(mode="inference", method="qlora", batch=4, seq=16, new_tokens=4, quant_head=True)
    # generate's prefill logits for the last position of 4 rows: 4 x 32,000 x 2 B = 256,000 B beside the weight
    assert head_dequant_inference(llama7b, w, 4) == 262_144_000 + 256_000
    assert head_dequant_inference(llama7b, w, 1) == 0  # one row: gemv_4bit, nothing dequantized
    e = estimate(llama7b, mode="inference", method="qlora", batch=4, seq=16, new_tokens=4, quant_head=True)
    # ... with the prompt's hidden states (4 x 16 x 4,096 x 2 B = 524,288)
    assert e.breakdown["activations"] == 262_400_000 + 524_288 == 262_924_288
    one = dict(mode="inference", method="qlora", batch=1, seq=16, new_tokens=4)
    assert (estimate(llama7b, **one, quant_head=True).breakdown["activations"]
            == estimate(llama7b, **one).breakdown["activations"])


def test_fp16_dequantization_of_the_blocks(llama7b):
    w = make_workload(**{**QLORA, "seq": 16}, dequant_dtype="fp16")
    assert dequant_cast_bytes(w, 11_008, 4_096) == 11_008 * 4_096 * 2 == 90_177_536
    assert dequant_cast_bytes(make_workload(**QLORA), 11_008, 4_096) == 0
    assert dequant_cast_bytes(make_workload(**{**QLORA, "dtype": "fp16"}, dequant_dtype="fp16"), 11_008, 4_096) == 0
    # gate/up_proj's backward at 16 tokens: the bf16 weight, the incoming gradient (16 x 11,008 -> 352,256 B) and,
    # at the cast, the fp16 weight (more than the input's gradient, 131,072 B)
    e = estimate(llama7b, **{**QLORA, "seq": 16}, dequant_dtype="fp16")
    assert e.breakdown["temporaries"] == 2 * 90_177_536 + 352_256 == 180_707_328


def test_tied_head_note_and_ignored_settings():
    e = estimate("qwen2.5-0.5b", mode="inference", quant="int8", quant_head=True)
    assert any("unties them" in n for n in e.breakdown.notes)
    w = make_workload(mode="train", method="lora", quant_head=True, dequant_dtype="fp16")
    assert w.ignored() == [
        "ignored: quant_head=True stores the output layer in the quantized format, and no weights are quantized "
        "(use --method qlora or --quant)",
        "ignored: dequant_dtype='fp16' is the dtype bitsandbytes dequantizes a 4-bit weight to, and no weights are "
        "in 4 bits (nf4, nf4-dq, fp4)",
    ]


@pytest.mark.parametrize("kw, message", [
    (dict(tp=2, gpus=2), "quant_head with tp=2 pp=1 (a quantized output layer split over GPUs) is not modelled: "
                         "drop --quant-head, or --tp/--pp"),
    (dict(loss="fused-linear"), "quant_head with loss=fused-linear: Liger's fused loss reads the output layer's "
                                "weight as a plain tensor, which a quantized layer does not have: drop one of them"),
    (dict(dtype="fp32", amp="bf16"), "quant_head under torch.autocast (dtype=fp32 amp=bf16) is not modelled: use "
                                     "--dtype bf16 without --amp"),
    (dict(dequant_dtype="bf16"), "dequant_dtype='bf16' is not one of: compute, fp16"),
])
def test_refusals(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**{**QLORA, "quant_head": True, **kw})
    assert str(e.value) == message


def test_a_classifier_has_no_output_layer_to_quantize():
    with pytest.raises(ConfigError) as e:
        estimate("bert-base-uncased", mode="inference", quant="int8", quant_head=True, task="sequence-classification")
    assert str(e.value) == ("quant_head quantizes a causal LM's output layer (lm_head); google-bert/bert-base-uncased "
                            "runs sequence-classification: drop --quant-head")
